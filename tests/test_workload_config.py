"""build_workload: presets and trace files, the fixed order of transformations, seeds."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.checks import MAX_TOKENS
from batchlab.core.workload import LengthSpec, WorkloadConfig, build_workload, load_trace
from batchlab.core.workload.stats import interarrival_cv, mean_rate

DATA = Path(__file__).parent / "data"
CONV = str(DATA / "azure_conv_300.csv")
LENGTHS = str(DATA / "sharegpt_lengths_300.csv")


def same(a, b) -> bool:
    return all(np.array_equal(getattr(a, c), getattr(b, c))
               for c in ("arrival", "prompt_len", "output_len")) and a.description == b.description


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(["chat", "uniform"]), st.integers(1, 300), st.integers(0, 2**32),
       st.sampled_from([0.25, 1.0, 4.0]))
def test_presets_are_reproducible_from_the_seed(source, n, seed, burstiness):
    cfg = WorkloadConfig(source=source, num_requests=n, seed=seed, burstiness=burstiness)
    assert same(build_workload(cfg), build_workload(cfg))
    assert len(build_workload(cfg)) == n


def test_burstiness_follows_vllm_conventions():
    cv = {b: interarrival_cv(build_workload(WorkloadConfig(num_requests=20_000, rate=10,
                                                           burstiness=b)))
          for b in (0.25, 1.0, 4.0)}
    assert cv[0.25] == pytest.approx(2.0, rel=0.05)  # Gamma shape b: CV 1/sqrt(b)
    assert cv[1.0] == pytest.approx(1.0, rel=0.05)  # Poisson
    assert cv[4.0] == pytest.approx(0.5, rel=0.05)
    assert not build_workload(WorkloadConfig(num_requests=5, rate=math.inf)).arrival.any()


def test_length_file_source_gets_generated_arrivals():
    w = build_workload(WorkloadConfig(source=LENGTHS, num_requests=200, rate=4, seed=3))
    rows = load_trace(LENGTHS)
    assert np.array_equal(w.prompt_len, rows.prompt_len[:200])  # file order, first N
    assert mean_rate(w) == pytest.approx(4, rel=0.2)
    assert w.description[1:] == ["first 200 requests", "arrivals: 4 req/s, burstiness 1, seed 3"]
    # no rate: all at once, as vllm bench serve's default
    assert not build_workload(WorkloadConfig(source=LENGTHS)).arrival.any()


def test_length_file_spec_draws_whole_rows():
    cfg = WorkloadConfig(source="uniform", num_requests=500, length_file=LENGTHS, seed=1)
    w = build_workload(cfg)
    rows = load_trace(LENGTHS)
    pairs = set(zip(rows.prompt_len.tolist(), rows.output_len.tolist()))
    assert set(zip(w.prompt_len.tolist(), w.output_len.tolist())) <= pairs
    assert same(w, build_workload(cfg))
    assert w.description[-1] == f"lengths drawn from {LENGTHS}"


def test_length_spec_from_one_column_of_any_trace():
    spec = LengthSpec(dist="file", path=CONV, column="output", max=100)
    x = spec.sample(1000, np.random.default_rng(0))
    conv = load_trace(CONV).output_len
    assert set(x.tolist()) <= set(np.minimum(conv, 100).tolist()) and x.max() == 100
    with pytest.raises(ValueError, match="dist='file' needs column"):
        LengthSpec(dist="file", path=CONV)


def test_trace_with_every_transformation_in_the_documented_order():
    cfg = WorkloadConfig(source=CONV, jitter_s=1.0, window_start_s=10, window_duration_s=30,
                         num_requests=50, rate=2.0, rate_scale=0.5, length_scale=4,
                         max_prompt_len=200, max_output_len=40, max_concurrency=8,
                         think_time_s=0.5, seed=5)
    w = build_workload(cfg)
    steps = [d.split(":")[0].split(" ")[0] for d in w.description]
    assert steps == ["azure", "jitter", "window", "first", "time", "rate", "lengths", "prompt",
                     "output", "closed"]
    assert len(w) == 50 and mean_rate(w) == pytest.approx(1.0)
    assert w.prompt_len.max() <= 200 and w.output_len.max() <= 40
    assert (w.max_concurrency, w.think_time_s) == (8, 0.5)
    assert same(w, build_workload(cfg))
    assert not same(w, build_workload(cfg.model_copy(update={"seed": 6})))  # jitter is seeded


def test_untransformed_trace_is_the_file():
    w = build_workload(WorkloadConfig(source=CONV))
    assert same(w, load_trace(CONV))


def test_rate_on_a_trace_rescales_time_and_keeps_its_shape():
    raw = load_trace(CONV)
    w = build_workload(WorkloadConfig(source=CONV, rate=20))
    assert mean_rate(w) == pytest.approx(20)
    assert interarrival_cv(w) == pytest.approx(interarrival_cv(raw))


def test_closed_loop_reaches_the_simulator():
    w = build_workload(WorkloadConfig(source="uniform", num_requests=3, max_concurrency=2,
                                      think_time_s=1.5))
    assert (w.max_concurrency, w.think_time_s) == (2, 1.5)
    assert w.description[-1] == "closed loop: 2 in flight, think 1.5 s"


def _leaf_specs():
    return st.one_of(
        st.builds(lambda v: LengthSpec(dist="fixed", value=v), st.integers(1, 500)),
        st.builds(lambda lo, span: LengthSpec(dist="uniform", low=lo, high=lo + span),
                  st.integers(1, 100), st.integers(0, 2000)),
        st.builds(lambda m, s: LengthSpec(dist="lognormal", mean=m, sigma=s, max=8192),
                  st.floats(1, 2000), st.floats(0, 2)),
        st.builds(lambda col: LengthSpec(dist="file", path=LENGTHS, column=col),
                  st.sampled_from(["prompt", "output"])))


length_specs = st.recursive(_leaf_specs(), lambda children: st.builds(
    lambda parts: LengthSpec(dist="mixture", components=[
        c.model_copy(update={"weight": w}) for c, w in parts]),
    st.lists(st.tuples(children, st.floats(0.01, 10)), min_size=1, max_size=4)), max_leaves=6)


@settings(max_examples=60, deadline=None)
@given(length_specs, st.integers(0, 2**32), st.integers(1, 400), st.data())
def test_lengths_are_prefix_stable(spec, seed, n, data):
    """The first k of n lengths are the k a k-request workload draws: a workload's
    request i must not change with --num-requests (a mixture used to shift them)."""
    k = data.draw(st.integers(1, n))
    full = spec.sample(n, np.random.default_rng(seed))
    assert np.array_equal(full[:k], spec.sample(k, np.random.default_rng(seed)))


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["chat", "uniform", "length_file"]), st.integers(0, 2**32),
       st.integers(2, 400), st.sampled_from([None, 0.1, 1.0, 4.0]),
       st.sampled_from([3.0, 50.0, math.inf]), st.data())
def test_workloads_are_prefix_stable(source, seed, n, burstiness, rate, data):
    """Arrivals (Gamma gaps) and lengths of a k-request workload are the first k of an
    n-request one with the same seed."""
    k = data.draw(st.integers(1, n))
    extra = dict(source="uniform", length_file=LENGTHS) if source == "length_file" else {}
    cfg = WorkloadConfig(**{"source": source, **extra}, seed=seed, burstiness=burstiness,
                         rate=rate)
    full = build_workload(cfg.model_copy(update={"num_requests": n}))
    first = build_workload(cfg.model_copy(update={"num_requests": k}))
    for col in ("arrival", "prompt_len", "output_len"):
        assert np.array_equal(getattr(full, col)[:k], getattr(first, col)), col


def test_chat_request_0_does_not_depend_on_the_workload_size():
    """The review's case: request 0's reply was 292, 282, 269 tokens for N = 5, 10, 1000."""
    lens = {n: build_workload(WorkloadConfig(source="chat", num_requests=n)).output_len[0]
            for n in (5, 10, 1000)}
    assert len(set(lens.values())) == 1, lens


def _reference_sample(spec: LengthSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    """LengthSpec.sample as first written (a temporary a pass, a mixture by masks)."""
    if spec.dist == "lognormal":
        mu = np.log(spec.mean) - spec.sigma**2 / 2
        x = np.rint(np.minimum(rng.lognormal(mu, spec.sigma, size=n), MAX_TOKENS)).astype(np.int64)
    elif spec.dist == "mixture":
        w = np.array([c.weight for c in spec.components])
        which = rng.choice(len(w), size=n, p=w / w.sum())
        x = np.empty(n, dtype=np.int64)
        for k, (comp, child) in enumerate(zip(spec.components, rng.spawn(len(spec.components)))):
            x[which == k] = _reference_sample(comp, n, child)[which == k]
    else:
        return spec.sample(n, rng)
    return np.clip(x, spec.min, spec.max if spec.max is not None else None).astype(np.int64)


@settings(max_examples=60, deadline=None)
@given(length_specs, st.integers(0, 2**32), st.integers(0, 400), st.integers(1, 40))
def test_lengths_are_those_first_drawn(spec, seed, n, many):
    """Drawn in place (and a mixture picked in one pass, or by masks past np.choose's
    limit), the lengths and their type are those of the plain formulas."""
    for s in (spec, LengthSpec(dist="mixture", components=[spec] * many, min=3, max=600)):
        got, want = s.sample(n, np.random.default_rng(seed)), _reference_sample(s, n, np.random.default_rng(seed))
        assert got.dtype == want.dtype == np.int64 and np.array_equal(got, want)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(["chat", "uniform", "length_file", "multiturn"]), st.integers(0, 2**32), st.integers(1, 300))
def test_streams_drawn_side_by_side_are_the_serial_draws(source, seed, n):
    """Past THREADED_DRAWS requests the lengths and arrivals are drawn in threads, each
    stream from its own generator: the workload is the one drawn in turn."""
    import batchlab.core.workload.config as config
    import batchlab.core.workload.lengths as lengths

    kw = {"length_file": LENGTHS, "source": "chat"} if source == "length_file" else {"source": source}
    cfg = WorkloadConfig(num_requests=n, seed=seed, **kw)
    keep = lengths.THREADED_DRAWS
    try:
        lengths.THREADED_DRAWS = config.THREADED_DRAWS = 10**12
        serial = build_workload(cfg)
        lengths.THREADED_DRAWS = config.THREADED_DRAWS = 1
        threaded = build_workload(cfg)
    finally:
        lengths.THREADED_DRAWS = config.THREADED_DRAWS = keep
    for c in ("arrival", "prompt_len", "output_len"):
        assert np.array_equal(getattr(serial, c), getattr(threaded, c))
    assert serial.describe() == threaded.describe()
