"""The validation machinery on simulated runs (no torch): a run against itself has zero
error, step matching, divergence explained, the overhead correction."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost import LinearCostModel
from batchlab.core.workload import WorkloadConfig, build_workload
from batchlab.experiments.validation import compare
from batchlab.core.loop_time import Overhead, busy_gaps, fit_overhead
from batchlab.core.cost_at_speed import CostAtSpeed
from batchlab.experiments.machine_speed import kind_factors
from batchlab.experiments.validation.variants import Scaled, fit_linear_cost
from batchlab.experiments.validation.pair import run_sim
from batchlab.experiments.validation.steps import first_divergence, match_steps
from batchlab.experiments.validation.validate import compare_runs
from batchlab.sim import simulate

COST = LinearCostModel(0.010, {"num_seqs": 2e-4, "prefill_tokens": 5e-5, "kv_tokens_read": 1e-7})
SCHED = SchedulerConfig(policy="continuous", max_num_seqs=8, num_kv_blocks=400, block_size=16)


def workload(n: int = 30, rate: float = 20.0):
    return build_workload(WorkloadConfig(source="chat", num_requests=n, rate=rate, seed=3,
                                         max_prompt_len=128, max_output_len=40))


@pytest.fixture(scope="module")
def run():
    return run_sim(workload(), SCHED, COST)


def test_a_run_against_itself_has_zero_error(run):
    comp = compare_runs(run, run, COST)
    assert all(m["error"] == 0 for m in comp["metrics"] if not math.isnan(m["real"]))
    assert comp["misses"] == [] and comp["worst_error"] == 0
    st = comp["steps"]
    assert st["identical"] and st["first_divergence"] is None and st["matched_fraction"] == 1
    # The sim's step durations are the cost model's prices: zero per-step error.
    assert st["duration_error"]["matched"]["median_ape"] == pytest.approx(0, abs=1e-9)
    assert st["duration_error"]["all_real"]["p90_ape"] == pytest.approx(0, abs=1e-9)
    assert comp["divergence"]["step"] is None


def test_the_table_has_every_metric_and_stat(run):
    cells = compare.compare_summaries(run.result.summary(), run.result.summary())
    keys = {c.key for c in cells}
    for stem in ("ttft", "tpot", "itl", "e2el", "queueing_delay"):
        for stat in ("mean", "median", "p90", "p99"):
            assert f"{stat}_{stem}_ms" in keys
    assert {"request_throughput", "output_throughput"} <= keys
    targeted = {c.key for c in cells if c.target is not None}
    assert "p99_ttft_ms" in targeted and "mean_itl_ms" not in targeted


def test_rel_error_and_targets():
    assert compare.rel_error(100.0, 104.0) == pytest.approx(0.04)
    assert compare.rel_error(0.0, 0.0) == 0.0
    assert math.isnan(compare.rel_error(0.0, 1.0)) and math.isnan(compare.rel_error(math.nan, 1.0))
    cells = compare.compare_summaries({"p99_ttft_ms": 100.0, "mean_ttft_ms": 100.0},
                                      {"p99_ttft_ms": 109.0, "mean_ttft_ms": 106.0})
    by = {c.key: c for c in cells}
    assert by["p99_ttft_ms"].ok and by["mean_ttft_ms"].ok is False
    assert [f"{c.metric} {c.stat}" for c in compare.misses(cells)][0] == "TTFT mean"


def test_step_matching():
    a, b = ["x", "y", "z", "w"], ["x", "y", "q", "z"]
    assert first_divergence(a, b) == 2
    assert first_divergence(a, a) is None and first_divergence(a, a[:3]) == 3
    ia, ib = match_steps(a, b)
    assert ia.tolist() == [0, 1, 2] and ib.tolist() == [0, 1, 3]


def test_divergence_is_explained_by_an_arrival():
    """A slower cost model moves the step boundaries; an arrival lands between them."""
    w = workload(20, 30.0)
    fast = run_sim(w, SCHED, COST)
    slow = run_sim(w, SCHED, replace(COST, intercept=COST.intercept * 1.3))
    comp = compare_runs(fast, slow, COST)
    div = comp["divergence"]
    assert comp["steps"]["first_divergence"] == div["step"] is not None
    assert div["arrivals_between"] and "arrived between" in div["reason"]
    assert comp["worst_error"] > 0.05 and comp["misses"]


def test_simulated_steps_have_no_gaps_and_no_overhead(run):
    gaps, _ = busy_gaps(run.result)
    assert gaps.size > 0 and np.allclose(gaps, 0, atol=1e-9)
    assert fit_overhead(run.result).per_step_s == pytest.approx(0, abs=1e-9)


def test_corrected_costs_keep_fast_forward_exact():
    cost = CostAtSpeed(Scaled(COST, 1.1, 1.3), loop=Overhead(3e-4, 2e-5, 0.0, 0))
    w = workload()
    a = simulate(w, SCHED, cost, SCHED.num_kv_blocks, fast_forward=True)
    b = simulate(w, SCHED, cost, SCHED.num_kv_blocks, fast_forward=False)
    np.testing.assert_allclose(a.requests["finish_s"], b.requests["finish_s"], rtol=0, atol=1e-12)
    base = simulate(w, SCHED, COST, SCHED.num_kv_blocks)
    assert a.summary()["duration"] > base.summary()["duration"]


def test_kind_factors(run):
    assert kind_factors(run.result.steps, COST) == pytest.approx({"all": 1, "decode": 1, "prefill": 1})
    k = kind_factors(run.result.steps, Scaled(COST, 2.0, 4.0))
    assert k["decode"] == pytest.approx(0.5) and k["prefill"] == pytest.approx(0.25)
    assert 0.25 < k["all"] < 0.5


def test_self_fit_recovers_a_linear_cost(run):
    fitted = fit_linear_cost(run.result)
    pred = fitted.intercept + sum(c * run.result.steps[n] for n, c in fitted.coef.items())
    np.testing.assert_allclose(pred, run.result.steps["duration_s"], rtol=1e-6)


def test_the_header_names_exactly_the_rows_judged_against_targets(run):
    """The `*` legend must not promise stars on rows that are never judged (ITL,
    queueing delay): it names the judged rows before its first ';', the others last."""
    from batchlab.experiments.validation.text import heading
    legend = heading({"policy": "continuous", "profile": {}}).split("* = over target")[1]
    judged_part, unjudged_part = legend.split(";")[0], legend.split(";")[-1]
    judged = {c.metric for c in compare.compare_summaries(run.result.summary(), run.result.summary())
              if c.target is not None}
    for _, label in compare.LATENCIES:
        assert (label in judged_part, label in unjudged_part) == (label in judged, label not in judged), label
    assert "throughput 5%" in legend and "ITL and queueing delay are not judged" in legend
