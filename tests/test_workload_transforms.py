"""Transformations: what each does, and invariants for any workload (hypothesis)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.workload import Workload
from batchlab.core.workload import transforms as tf
from batchlab.core.workload.stats import interarrival_cv, mean_rate


def make(arrival, prompt=None, output=None, hashes=None) -> Workload:
    n = len(arrival)
    return Workload(np.asarray(arrival, float), prompt if prompt is not None else [100] * n,
                    output if output is not None else [10] * n, prefix_hashes=hashes,
                    description=["test"])


@st.composite
def workloads(draw) -> Workload:
    n = draw(st.integers(1, 40))
    gaps = draw(st.lists(st.floats(0, 50, allow_nan=False), min_size=n, max_size=n))
    lengths = st.lists(st.integers(1, 20_000), min_size=n, max_size=n)
    return make(np.cumsum(gaps), draw(lengths), draw(lengths))


def assert_valid(w: Workload) -> None:
    if len(w):
        assert w.arrival[0] >= 0 and np.all(np.diff(w.arrival) >= 0)
        assert w.prompt_len.min() >= 1 and w.output_len.min() >= 1
    assert w.description[0] == "test" and len(w.description) >= 2


def test_window_keeps_half_open_interval_and_shifts_to_zero():
    w = tf.window(make([0, 1, 2, 3, 4]), 1, 2)
    assert w.arrival.tolist() == [0, 1] and w.description[-1] == "window [1, 3) s: 2 requests"
    assert tf.window(make([0, 5, 6]), 2).arrival.tolist() == [3, 4]  # quiet start stays quiet


def test_first_n_says_when_there_are_fewer():
    assert len(tf.first_n(make([0, 1, 2]), 2)) == 2
    w = tf.first_n(make([0, 1]), 5)
    assert len(w) == 2 and w.description[-1] == "first 5 requests: all 2 there are"


def test_rates():
    w = make([0, 1, 2, 4])
    assert mean_rate(w) == 0.75
    assert mean_rate(tf.scale_rate(w, 2)) == 1.5
    assert tf.scale_rate(w, 2).arrival.tolist() == [0, 0.5, 1, 2]
    assert mean_rate(tf.set_rate(w, 3)) == pytest.approx(3)
    assert not tf.set_rate(w, math.inf).arrival.any()


def test_length_scaling_rounds_and_keeps_one_token():
    w = tf.scale_lengths(make([0, 0, 0], [1, 15, 4000], [3, 4, 100]), 8)
    assert w.prompt_len.tolist() == [1, 2, 500] and w.output_len.tolist() == [1, 1, 12]


def test_a_denormal_length_scale_is_refused_not_overflowed():
    """1e-320 divides every length to inf (and the hash block with it): a one-line error
    naming the field, not an OverflowError from rounding the block."""
    with pytest.raises(ValueError, match="length_scale .* makes a length of inf tokens"):
        tf.scale_lengths(make([0, 0], [10, 20], [3, 4]), 1e-320)


def test_clipping_cuts_prefix_hashes_in_proportion():
    w = make([0, 1], [1024, 300], [5, 900], hashes=[(1, 2), (3,)])
    c = tf.clip_lengths(w, max_prompt=512, max_output=100)
    assert c.prompt_len.tolist() == [512, 300] and c.output_len.tolist() == [5, 100]
    assert c.prefix_hashes == [(1,), (3,)]
    assert c.description[-2:] == ["prompt lengths clipped to 512 tokens (1 requests)",
                                  "output lengths clipped to 100 tokens (1 requests)"]


def test_jitter_spreads_within_the_step_and_is_seeded():
    w = make(np.repeat([0.0, 3.0, 6.0], 100), prompt=np.arange(1, 301))
    a = tf.jitter(w, 3.0, np.random.default_rng(1))
    b = tf.jitter(w, 3.0, np.random.default_rng(1))
    assert np.array_equal(a.arrival, b.arrival) and np.array_equal(a.prompt_len, b.prompt_len)
    step = (a.prompt_len - 1) // 100  # which 3 s step each request came from
    assert np.all(a.arrival >= 3 * step) and np.all(a.arrival < 3 * step + 3)
    assert len(np.unique(a.arrival)) == 300 and 0.8 < interarrival_cv(a) < 1.2


def test_transforms_leave_the_input_alone():
    w = make([0, 1, 2], [10, 20, 30], hashes=[(1,), (2,), (3,)])
    before = (w.arrival.copy(), w.prompt_len.copy(), list(w.description), list(w.prefix_hashes))
    for out in (tf.window(w, 1), tf.scale_rate(w, 2), tf.scale_lengths(w, 2),
                tf.clip_lengths(w, 15), tf.jitter(w, 1, np.random.default_rng(0)), tf.first_n(w, 1)):
        assert out is not w
    assert np.array_equal(w.arrival, before[0]) and np.array_equal(w.prompt_len, before[1])
    assert w.description == before[2] and w.prefix_hashes == before[3]


@settings(max_examples=60, deadline=None)
@given(workloads(), st.floats(0, 100), st.floats(0.1, 100), st.integers(1, 50),
       st.floats(0.1, 10), st.floats(0.5, 64), st.integers(1, 4096), st.floats(0.1, 5))
def test_any_chain_gives_a_valid_described_workload(w, start, dur, n, rate, k, cap, step):
    rng = np.random.default_rng(0)
    out = tf.jitter(w, step, rng)
    assert_valid(out) and len(out) == len(w)
    out = tf.window(out, start, dur)
    assert len(out) <= len(w)
    assert_valid(out)
    assert np.all(out.arrival < dur)
    if not len(out):
        return
    out = tf.first_n(out, n)
    assert len(out) <= n
    out = tf.scale_rate(out, rate)
    out = tf.scale_lengths(out, k)
    out = tf.clip_lengths(out, cap, cap)
    assert_valid(out)
    assert out.prompt_len.max() <= cap and out.output_len.max() <= cap
    assert len(out.description) == 8  # test + 7 steps (clipping records prompt and output)


@settings(max_examples=60, deadline=None)
@given(workloads(), st.floats(0.01, 100))
def test_rate_scaling_keeps_the_shape(w, factor):
    out = tf.scale_rate(w, factor)
    assert np.allclose(out.arrival * factor, w.arrival)
    cv_in, cv_out = interarrival_cv(w), interarrival_cv(out)
    assert (math.isnan(cv_in) and math.isnan(cv_out)) or cv_out == pytest.approx(cv_in, rel=1e-6)


@settings(max_examples=60, deadline=None)
@given(workloads(), st.floats(1, 64))
def test_length_scaling_keeps_order_of_lengths(w, k):
    out = tf.scale_lengths(w, k)
    # dividing is monotone: a longer prompt never becomes shorter than a shorter one
    order = np.argsort(w.prompt_len, kind="stable")
    assert np.all(np.diff(out.prompt_len[order]) >= 0)
    assert np.all(out.prompt_len <= np.maximum(1, w.prompt_len))
