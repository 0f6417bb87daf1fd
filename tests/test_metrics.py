"""Metrics kept compactly (gap pairs, step totals) give the figures the full tables do."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.dispatch import roofline
from batchlab.core.model.presets import lookup_hardware, lookup_model
from batchlab.core.gap_histogram import G0, G_MAX, R, GapHistogram
from batchlab.core.summary import weighted_percentiles
from batchlab.core.workload import WorkloadConfig, build_workload
from batchlab.sim import simulate
from tests.same_runs import COSTS
from tests.test_fast_forward import scenarios

COST = roofline(lookup_model("llama-3-8b"), lookup_hardware("a100-80gb"), 1, 0.8, 0.6, 0.002)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 10, allow_nan=False), st.integers(1, 50)), min_size=1, max_size=30),
       st.lists(st.floats(0, 100), min_size=1, max_size=5))
def test_weighted_percentiles_equal_numpy_on_the_repeated_values(pairs, q):
    values = np.array([v for v, _ in pairs])
    counts = np.array([c for _, c in pairs])
    expected = np.percentile(np.repeat(values, counts), q)
    np.testing.assert_allclose(weighted_percentiles(values, counts, tuple(q)), expected,
                               rtol=1e-12, atol=1e-12)


def run(policy: str, record_steps: bool):
    w = build_workload(WorkloadConfig(source="chat", num_requests=300, rate=20.0, seed=3))
    return w, simulate(w, SchedulerConfig(policy=policy, max_num_seqs=16), COST, 3000,
                       record_steps=record_steps)


def test_one_gap_per_token_after_the_first():
    for policy in ("static", "continuous", "chunked"):
        w, r = run(policy, True)
        done = r.requests["status"] == "finished"
        assert done.all()
        assert int(r.itl_counts.sum()) == int((r.requests["output_len"] - 1).sum())
        assert len(r.itl_gaps) < r.itl_counts.sum() / 2, "tokens of a step share gap pairs"
        assert (r.itl_gaps > 0).all()


def test_gap_histogram_is_within_its_resolution_and_keeps_counts():
    rng = np.random.default_rng(0)
    gaps = np.concatenate((rng.lognormal(-4, 1.5, 5000), [0.0, 1e-9, 2e5]))
    counts = rng.integers(1, 40, len(gaps))
    h = GapHistogram()
    h.add(gaps[:2000], counts[:2000])
    h.add(gaps[2000:], counts[2000:])  # folding in two parts changes nothing
    values, got = h.pairs()
    assert got.sum() == counts.sum()
    q = (0, 1, 50, 90, 99, 100)
    exact = weighted_percentiles(np.clip(gaps, G0, G_MAX), counts, q)  # the range's ends clamp
    hist = weighted_percentiles(values, got, q)
    np.testing.assert_allclose(hist, exact, rtol=R / 2 * 1.0001)


def test_totals_without_a_step_table_give_the_same_summary():
    for policy in ("static", "continuous", "chunked"):
        _, full = run(policy, True)
        _, lean = run(policy, False)
        assert lean.steps is None and full.steps is not None
        a, b = full.summary(), lean.summary()
        assert a.keys() == b.keys()
        # Without a step table each gap is read from a histogram, within R/2 of itself:
        # so each ITL percentile and the mean within R/2 relative, and the std (which
        # moves at most by the largest error) within R/2 of the largest gap.
        for k in a:
            tol = dict(rtol=R / 2) if "itl" in k else dict(rtol=1e-9)
            if k == "std_itl_ms":
                tol = dict(rtol=0, atol=R / 2 * 1000 * float(full.itl.max()))
            np.testing.assert_allclose(b[k], a[k], **tol, err_msg=k)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_without_a_step_table_the_histogram_holds_the_exact_gaps(scenario):
    """The fast-forward runs' gaps, folded from their token times (MetricsRecorder._fold),
    fill the very buckets the step table's exact gaps do; the rows and totals agree bit
    for bit."""
    work, cfg, blocks, cost, replicas = scenario
    kw = dict(replicas=replicas, router="least_loaded")
    full = simulate(work, cfg, COSTS[cost], blocks, record_steps=True, **kw)
    lean = simulate(work, cfg, COSTS[cost], blocks, record_steps=False, **kw)
    hist = GapHistogram()
    hist.add(full.itl_gaps, full.itl_counts)
    gaps, counts = hist.pairs()
    assert np.array_equal(lean.itl_gaps, gaps) and np.array_equal(lean.itl_counts, counts)
    for c in full.requests:
        assert np.array_equal(full.requests[c], lean.requests[c], equal_nan=full.requests[c].dtype.kind == "f"), c
    assert full.totals == lean.totals


def test_slo_attainment_counts_rejected_requests_as_misses():
    """A policy that rejects half the traffic must not look better for it."""
    from batchlab.core.summary import SLO
    from batchlab.core.workload import Workload
    n = 20
    prompts = np.where(np.arange(n) % 2 == 0, 50, 5000)  # odd ones exceed the token budget
    work = Workload(np.linspace(0, 1, n), prompts, np.full(n, 10))
    cost = roofline(lookup_model("llama-3-8b"), lookup_hardware("a100-80gb"), 1, 0.8, 0.6, 0.002)
    r = simulate(work, SchedulerConfig(policy="continuous", max_num_batched_tokens=1000), cost, 10_000)
    s = r.summary(SLO(ttft_ms=10_000))
    assert s["rejected"] == n // 2 and s["completed"] == n // 2
    assert s["slo_attainment"] == 0.5  # every finished one met a 10 s TTFT
    assert s["request_goodput"] == s["request_throughput"]
