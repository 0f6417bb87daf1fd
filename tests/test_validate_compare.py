"""The judgement of a validation on simulated runs (no torch): a run judged with the very
cost model that made it has zero error everywhere, step matching, divergence explained,
the typed judgement written and read back, and the report within 120 columns."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.cost.at_speed import CostAtSpeed
from batchlab.core.cost.loop_time import busy_gaps, fit_overhead, Overhead
from batchlab.core.run_folder import to_json
from batchlab.core.workload import WorkloadConfig, build_workload
from batchlab.experiments.validation import metrics, render
from batchlab.experiments.validation.judge import Judge
from batchlab.experiments.validation.pair import run_sim
from batchlab.experiments.validation.records import ProfileInfo, Validation
from batchlab.experiments.validation.sources import RealSide, live_run
from batchlab.experiments.validation.steps import first_divergence, match_steps
from batchlab.experiments.validation.verdicts import metric_rows
from batchlab.sim import simulate

COST = LinearCostModel(0.010, {"num_seqs": 2e-4, "prefill_tokens": 5e-5, "kv_tokens_read": 1e-7})
SCHED = SchedulerConfig(policy="continuous", max_num_seqs=8, num_kv_blocks=400, block_size=16)
INFO = ProfileInfo(source="test", describe="a linear test model", created="", heldout_median_ape_pct=None)


def workload(n: int = 30, rate: float = 20.0):
    return build_workload(WorkloadConfig(source="chat", num_requests=n, rate=rate, seed=3,
                                         max_prompt_len=128, max_output_len=40))


def side_of(w, *runs) -> RealSide:
    """Simulated runs of `w` standing in for live real runs of it."""
    return RealSide("here", w, SCHED, [live_run(r, "here") for r in runs])


@pytest.fixture(scope="module")
def run():
    return run_sim(workload(), SCHED, COST)


@pytest.fixture(scope="module")
def judged(run):
    judge = Judge(COST, None, INFO)
    j = judge.cell(side_of(workload(), run))
    return j, judge.report([j])


def test_a_run_judged_with_its_own_cost_model_has_zero_error(judged):
    j, _ = judged
    c = j.cell
    assert all(m.error == 0 and m.error_normalised == 0 for m in c.metrics if not math.isnan(m.real[0]))
    assert all(m.verdict == m.verdict_normalised == "ok" for m in c.metrics if m.target is not None)
    assert c.totals.verdicts.miss == 0 and c.totals.within == c.totals.judged > 0
    assert c.machine_speed[0].factor == pytest.approx(1.0)
    d = c.diagnostics
    st = d.steps
    assert st.identical and st.first_divergence is None and st.matched_fraction == 1
    # The sim's step durations are the cost model's prices: zero per-step error.
    assert d.step_error.median_ape == pytest.approx(0, abs=1e-9)
    assert d.step_error.p90_ape == pytest.approx(0, abs=1e-9)
    assert d.divergence.step is None
    assert d.distributions == [] and d.undecidable == []  # one run: no test between real runs


def test_the_table_has_every_metric_and_stat(run):
    s = run.result.summary()
    rows = metric_rows([s], s, None, False)
    keys = {m.key for m in rows}
    for stem in ("ttft", "tpot", "itl", "e2el", "queueing_delay"):
        for stat in ("mean", "median", "p90", "p99"):
            assert f"{stat}_{stem}_ms" in keys
    assert {"request_throughput", "output_throughput"} <= keys
    targeted = {m.key for m in rows if m.target is not None}
    assert "p99_ttft_ms" in targeted and "mean_itl_ms" not in targeted
    assert all(m.verdict_normalised is None and math.isnan(m.error_normalised) for m in rows)  # no steps


def test_rel_error_and_targets():
    assert metrics.rel_error(100.0, 104.0) == pytest.approx(0.04)
    assert metrics.rel_error(0.0, 0.0) == 0.0
    assert math.isnan(metrics.rel_error(0.0, 1.0)) and math.isnan(metrics.rel_error(math.nan, 1.0))
    rows = metric_rows([{"p99_ttft_ms": 100.0, "mean_ttft_ms": 100.0}],
                       {"p99_ttft_ms": 109.0, "mean_ttft_ms": 106.0}, None, False)
    by = {m.key: m for m in rows}
    assert by["p99_ttft_ms"].verdict == "ok" and by["mean_ttft_ms"].verdict == "miss"
    assert [m.label for m in rows if m.verdict == "miss"][0] == "TTFT mean"


def test_step_matching():
    a, b = ["x", "y", "z", "w"], ["x", "y", "q", "z"]
    assert first_divergence(a, b) == 2
    assert first_divergence(a, a) is None and first_divergence(a, a[:3]) == 3
    ia, ib = match_steps(a, b)
    assert ia.tolist() == [0, 1, 2] and ib.tolist() == [0, 1, 3]


def test_divergence_is_explained_by_an_arrival():
    """A slower profile moves the step boundaries; an arrival lands between them."""
    w = workload(20, 30.0)
    fast = run_sim(w, SCHED, COST)
    slow = Judge(replace(COST, intercept=COST.intercept * 1.3), None, INFO)
    c = slow.cell(side_of(w, fast)).cell
    div = c.diagnostics.divergence
    assert c.diagnostics.steps.first_divergence == div.step is not None
    assert div.arrivals_between and "arrived between" in div.reason
    assert max(abs(m.error) for m in c.metrics if m.target is not None) > 0.05
    assert c.totals.verdicts.miss > 0


def test_simulated_steps_have_no_gaps_and_no_overhead(run):
    gaps, _ = busy_gaps(run.result)
    assert gaps.size > 0 and np.allclose(gaps, 0, atol=1e-9)
    assert fit_overhead(run.result).per_step_s == pytest.approx(0, abs=1e-9)


def test_a_cost_at_a_speed_with_loop_time_keeps_fast_forward_exact():
    cost = CostAtSpeed(COST, 1.1, None, (), Overhead(3e-4, 2e-5, 0.0, 0))
    w = workload()
    a = simulate(w, SCHED, cost, SCHED.num_kv_blocks, fast_forward=True)
    b = simulate(w, SCHED, cost, SCHED.num_kv_blocks, fast_forward=False)
    np.testing.assert_allclose(a.requests["finish_s"], b.requests["finish_s"], rtol=0, atol=1e-12)
    base = simulate(w, SCHED, COST, SCHED.num_kv_blocks)
    assert a.summary()["duration"] > base.summary()["duration"]


def test_the_judgement_reads_back_as_it_was_written(judged):
    """comparison.json holds the typed judgement: read back, it writes the same JSON (a NaN
    is null both ways), and a stored run's cell has no diagnostics key at all."""
    _, v = judged
    text = to_json(v.as_dict())
    again = Validation.model_validate(json.loads(text))
    assert to_json(again.as_dict()) == text
    assert again.cells[0].diagnostics.steps.identical and again.per_step.steps == v.per_step.steps
    stored = v.cells[0].model_copy(update={"diagnostics": None})
    assert list(stored.as_dict()) == ["where", "policy", "runs", "stability", "machine_speed", "metrics", "totals"]


def test_the_report_shows_exactly_the_judged_rows_within_120_columns(judged):
    """The table lists the rows judged against a target (not ITL, not queueing delay: they
    are in comparison.json), the totals line names the targets, and no line of a live
    source's report runs past 120 columns."""
    j, v = judged
    text = render.render_cell(j.cell) + "\n" + render.render_end(v, "1 policy served here")
    labels = {m.label for m in j.cell.metrics if m.target is not None}
    table = text.splitlines()[2:2 + len(labels)]
    assert {line[:22].strip() for line in table} == labels
    assert "ITL" not in text and "queueing delay" not in text
    assert "(targets: mean 5%, median 5%, p90 5%, p99 10%, throughput 5%)" in text.replace("\n    ", " ")
    assert max(len(line) for line in text.splitlines()) <= render.WIDTH
