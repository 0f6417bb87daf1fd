"""build_workload: presets and trace files, the fixed order of transformations, seeds."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.workload import LengthSpec, WorkloadConfig, build_workload, load_trace
from core.workload.stats import interarrival_cv, mean_rate

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
