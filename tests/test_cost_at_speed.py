"""A cost model at a measured speed whose level changes with the clock
(core/cost/at_speed.py windows): the simulation prices each step, and each fast-forwarded
run, at the level of the window it starts in; the normalised variant moves a fitted
profile's memory side with a run's measured windows and keeps its FLOP terms at the run's
compute factor."""
from __future__ import annotations

import numpy as np
import pytest

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.cost.at_speed import CostAtSpeed
from batchlab.core.workload import Workload
from batchlab.sim import simulate

BASE, SLOW = LinearCostModel(0.01), LinearCostModel(0.02)
SWITCH = 1.0  # the machine runs twice as slow from here on
DRIFTING = CostAtSpeed(BASE, windows=((0.0, 1.0), (SWITCH, 2.0)))


def workload() -> Workload:
    """Short requests arriving every 0.2 s for 3 s: steps start on both sides of SWITCH."""
    n = 15
    return Workload(np.arange(n) * 0.2, np.full(n, 8), np.full(n, 6), description=["drift test"])


def run(cost, fast_forward: bool):
    return simulate(workload(), SchedulerConfig(policy="continuous"), cost, 1000, fast_forward=fast_forward)


def test_each_step_is_priced_in_the_window_it_starts_in():
    steps = run(DRIFTING, fast_forward=False).steps
    before, after = steps["start_s"] < SWITCH, steps["start_s"] >= SWITCH
    assert before.any() and after.any()
    assert steps["duration_s"][before] == pytest.approx(0.01)
    assert steps["duration_s"][after] == pytest.approx(0.02)


def test_fast_forwarded_runs_take_the_level_of_their_start():
    steps = run(DRIFTING, fast_forward=True).steps
    d, start = steps["duration_s"], steps["start_s"]
    assert set(np.round(d, 6)) == {0.01, 0.02}
    assert d[start < SWITCH] == pytest.approx(0.01)
    # a run is cut at the next arrival (every 0.2 s): steps this late belong to runs that
    # started after the switch
    assert d[start >= SWITCH + 0.2] == pytest.approx(0.02)
    slow_total = run(SLOW, True).steps["duration_s"].sum()
    assert run(BASE, True).steps["duration_s"].sum() < d.sum() < slow_total


def test_without_a_clock_it_prices_at_the_mean_and_bad_windows_are_refused():
    from batchlab.core.batch import StepFeatures

    drifting = CostAtSpeed(BASE, 1.5, windows=((0.0, 1.0), (SWITCH, 2.0)))
    step = StepFeatures(1, 0, 0, 1, 10, 10)
    assert drifting.step_time(step) == pytest.approx(0.015)
    assert drifting.at(-1.0) is drifting.at(0.5) and drifting.at(SWITCH) is drifting.at(99.0)
    assert drifting.at(-1.0).step_time(step) == BASE.step_time(step)
    assert drifting.at(SWITCH).step_time(step) == pytest.approx(SLOW.step_time(step))
    # (start, level) pairs: one level per window start by construction
    with pytest.raises(ValueError, match="ascending"):
        CostAtSpeed(BASE, windows=((1.0, 1.0), (0.0, 2.0)))


def test_the_normalised_variant_moves_the_memory_side_only():
    from batchlab.core.batch import StepFeatures
    from batchlab.core.cost.fitted import FittedCostModel, Shape
    from batchlab.core.run_meta import MachineSpeed
    from batchlab.core.model.presets import MODELS
    from batchlab.experiments.validation.normalised import normalised_cost

    model = FittedCostModel(Shape.of(MODELS["batchlab-small"]), overhead_s=0.016, per_seq_s=2e-4,
                            per_chunk_s=5e-4, s_per_weight_byte=1 / 20e9, s_per_flop=1 / 90e9,
                            s_per_kv_byte=1 / 4e9, s_per_attn_flop=1 / 60e9)
    speed = MachineSpeed(factor=1.1, compute_factor=0.9, drift_levels=[[0.0, 1.0], [2.0, 1.3]])
    cost = normalised_cost(model, speed, None)
    assert cost.at(0.5) is not cost.at(2.5)
    prefill = StepFeatures(1, 1, 512, 0, 512, 512 * 513 // 2)
    for now, level in ((0.5, 1.0), (2.5, 1.3)):
        assert cost.at(now).step_time(prefill) == pytest.approx(model.at_speed(level, 0.9).step_time(prefill))
    assert cost.step_time(prefill) == pytest.approx(model.at_speed(1.1, 0.9).step_time(prefill))
    one = normalised_cost(model, MachineSpeed(factor=1.1, compute_factor=0.9), None)
    assert one.at(0.5) is one.at(2.5) is one and one.step_time(prefill) == pytest.approx(cost.step_time(prefill))
