"""An endpoint's replays levelled by speed probes on the idle server (probe_speed.py): a
client sees no step table, so a replay the server ran at another speed than its profile's
is levelled by the probes before and after it. Simulated runs stand in for the server."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.at_speed import CostAtSpeed
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.workload import WorkloadConfig, build_workload
from batchlab.experiments.validation import render
from batchlab.experiments.validation.judge import Judge
from batchlab.experiments.validation.pair import run_sim
from batchlab.experiments.validation.probe_speed import PROBE, ProbeTimes, mean_tpot_s, probe_speed
from batchlab.experiments.validation.records import ProfileInfo
from batchlab.experiments.validation.sources import RealRun, RealSide

COST = LinearCostModel(0.010, {"num_seqs": 2e-4, "prefill_tokens": 5e-5, "kv_tokens_read": 1e-7})
SCHED = SchedulerConfig(policy="continuous", max_num_seqs=8, num_kv_blocks=400, block_size=16)
INFO = ProfileInfo(source="test", describe="a linear test model", created="", heldout_median_ape_pct=None)
WORKLOAD = build_workload(WorkloadConfig(source="chat", num_requests=20, rate=10.0, seed=5,
                                         max_prompt_len=128, max_output_len=32))


def endpoint_run(level: float, before: float = 1.0, after: float = 1.0) -> RealRun:
    """A replay the server ran at `level` x the profile's price, between probes at
    before x level and after x level."""
    real = run_sim(WORKLOAD, SCHED, CostAtSpeed(COST, level)).result
    probe = mean_tpot_s(run_sim(PROBE, SCHED, CostAtSpeed(COST, level)).result)
    return RealRun("endpoint", real.meta, real.summary(), None, real, probe=ProbeTimes(before * probe, after * probe))


def metric(cell, key: str):
    return next(m for m in cell.metrics if m.key == key)


@settings(max_examples=8, deadline=None)
@given(st.one_of(st.floats(0.4, 0.75), st.floats(1.35, 3.0)))
def test_a_replay_at_another_speed_is_levelled_by_its_probes(level):
    cell = Judge(COST, None, INFO).cell(RealSide("endpoint", WORKLOAD, SCHED, [endpoint_run(level)])).cell
    assert cell.machine_speed[0].factor == pytest.approx(level, rel=1e-3)
    for key in ("mean_tpot_ms", "median_ttft_ms", "mean_e2el_ms"):
        m = metric(cell, key)
        assert abs(m.error) > 0.2 and (m.error < 0) == (level > 1)  # the headline, as profiled, misses
        assert m.error_normalised == pytest.approx(0, abs=2e-3)  # levelled: the shape is the profile's


def test_a_replay_takes_the_mean_of_the_probes_around_it():
    """Probes at 0.8x and 1.2x the replay's level: the replay's factor is their mean."""
    cell = Judge(COST, None, INFO).cell(RealSide("endpoint", WORKLOAD, SCHED,
                                                 [endpoint_run(1.5, 0.8, 1.2)])).cell
    assert cell.machine_speed[0].factor == pytest.approx(1.5, rel=1e-3)
    assert metric(cell, "mean_tpot_ms").error_normalised == pytest.approx(0, abs=2e-3)


def test_the_probes_are_reported_and_without_them_there_is_no_normalised_variant():
    judge = Judge(COST, None, INFO)
    probed = judge.cell(RealSide("endpoint", WORKLOAD, SCHED, [endpoint_run(2.0, 0.9, 1.1)]))
    text = render.render_cell(probed.cell)
    assert "machine speed per replay (2.000) from an idle probe" in text and "differ by up to 20.0%" in text
    bare = endpoint_run(2.0)
    bare = RealRun(bare.where, bare.meta, bare.summary, None, bare.result)
    cell = judge.cell(RealSide("endpoint", WORKLOAD, SCHED, [bare])).cell
    assert metric(cell, "mean_tpot_ms").verdict_normalised is None and cell.machine_speed[0].factor is None


def test_a_probe_that_did_not_finish_gives_no_factor_and_says_why():
    assert probe_speed(ProbeTimes(math.nan, 0.01), 0.01, "p").why == "a speed probe did not finish"
    assert probe_speed(ProbeTimes(0.01, 0.01), 0.0, "p").why == "the profile prices the speed probe at 0 s"
    s = probe_speed(ProbeTimes(0.009, 0.011), 0.005, "p")
    assert s.factor == pytest.approx(2.0) and s.spread == pytest.approx(0.2)
