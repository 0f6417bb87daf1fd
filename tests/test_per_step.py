"""Issue 14's per-step test (experiments/validation/per_step.py): the profile's error on
every real step against the real runs' own spread on identical work."""
from __future__ import annotations

import numpy as np
import pytest

from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.features import FEATURE_NAMES
from batchlab.core.run_meta import MachineSpeed
from batchlab.experiments.validation.per_step import describe, identical_work_spread, per_step
from batchlab.experiments.validation.records import PerStep

COST = LinearCostModel(0.01)  # every step priced 10 ms


def run(durations: list[float], kv: list[int] | None = None) -> dict[str, np.ndarray]:
    """Decode steps of one sequence, reading `kv` tokens (default 10, 11, ...)."""
    n = len(durations)
    t = {name: np.zeros(n, np.int64) for name in FEATURE_NAMES}
    t["num_seqs"][:] = 1
    t["decode_tokens"][:] = 1
    t["kv_tokens_read"][:] = kv if kv is not None else np.arange(10, 10 + n)
    t["attention_pairs"][:] = t["kv_tokens_read"]
    t["duration_s"] = np.asarray(durations, float)
    t["start_s"] = np.concatenate(([0.0], np.cumsum(t["duration_s"])[:-1]))
    return t


def test_identical_work_pairs_kth_with_kth_and_skips_unmatched_steps():
    a = run([0.010, 0.020, 0.010], kv=[5, 5, 9])
    b = run([0.011, 0.030, 0.050, 0.012], kv=[5, 5, 5, 7])  # the third 5 and the 7 have no partner
    assert identical_work_spread(a, b) == pytest.approx([0.1, 0.5])


def test_model_error_against_the_real_runs_spread():
    slow = [0.012] * 40  # the machine ran 1.2x the price in both runs
    cells = [[(run(slow), MachineSpeed(factor=1.2)), (run([0.0132] * 40), MachineSpeed(factor=1.32))]]
    p = per_step(cells, COST)
    assert p.steps == 80 and p.pairs == 40
    assert p.real_vs_real == pytest.approx(0.1)
    # 40 steps 1/6 off (10 ms priced, 12 measured), 40 steps 0.32/1.32 off: the median between
    assert p.median_ape == pytest.approx((1 / 6 + 0.32 / 1.32) / 2)
    assert p.median_ape_normalised == pytest.approx(0.0, abs=1e-12)  # at each run's speed: exact
    assert p.faster_share == 1.0 and p.met is False
    exact = per_step([[(run([0.01] * 40), None), (run([0.011] * 40), None)]], COST)
    assert exact.median_ape < exact.real_vs_real and exact.met is True


def test_one_run_a_cell_cannot_decide():
    p = per_step([[(run([0.01] * 10), None)]], COST)
    assert p.pairs == 0 and p.met is None and p.median_ape == pytest.approx(0.0)


def test_normalised_error_follows_the_runs_drift_window_by_window():
    """A run whose machine ran at the price for its first 20 steps, then 1.5x it: priced
    per window of its measured drift, as the normalised simulation prices it, every step
    is exact; at the run's one mean factor, every step is off."""
    steps = run([0.010] * 20 + [0.015] * 20)
    mid = float(steps["start_s"][20])
    one = MachineSpeed(factor=1.25)
    windows = MachineSpeed(factor=1.25, drift_levels=[[0.0, 1.0], [mid, 1.5]])
    assert per_step([[(steps, windows)]], COST).median_ape_normalised == pytest.approx(0.0, abs=1e-12)
    assert per_step([[(steps, one)]], COST).median_ape_normalised > 0.15
    # the raw error ignores the speed
    assert per_step([[(steps, windows)]], COST).median_ape == per_step([[(steps, one)]], COST).median_ape


def test_one_level_for_all_runs_splits_the_median_step_from_the_total():
    """Skewed step times (a quarter of the steps 3x the rest): the level where the steps add
    up and the level of the median step differ, and each wins one of the two tests."""
    skewed = run([0.010] * 30 + [0.030] * 10)
    p = per_step([[(skewed, None)]], COST)
    assert p.level_total == pytest.approx(1.5) and p.level_median == pytest.approx(1.0)
    assert p.median_ape_at_total == pytest.approx(0.5)  # 15 ms against 10 and against 30
    assert p.median_ape_at_median == pytest.approx(0.0, abs=1e-12)
    text = describe(p)
    assert "x1.50, where their step times add up" in text and "with totals -33%" in text
    old = PerStep.model_validate({k: v for k, v in p.as_dict().items() if not k.startswith(("level_", "median_ape_at_"))})
    assert "one level" not in describe(old)  # a result stored before the split: no sentence
    assert "level_total" not in old.as_dict()  # and none written back


def test_the_spread_between_validations_of_the_same_work():
    """Stored validations of one workload and scheduler, served at other times: their first
    runs are paired on identical work; another workload, or the same directory given twice,
    adds no pair."""
    from batchlab.core.config import SchedulerConfig
    from batchlab.core.workload.workload import Workload
    from batchlab.core.run_meta import RunMeta
    from batchlab.experiments.validation.sources import RealRun, RealSide
    from batchlab.experiments.validation.stored import same_work_apart

    def cell(where: str, arrivals: list[float], durations: list[float]) -> RealSide:
        w = Workload(np.array(arrivals), np.full(len(arrivals), 20), np.full(len(arrivals), 5))
        return RealSide(where, w, SchedulerConfig(policy="continuous"),
                        [RealRun(f"{where}/real", RunMeta(), {}, run(durations))])
    morning, evening = cell("/m", [0.0, 1.0], [0.010] * 8), cell("/e", [0.0, 1.0], [0.012] * 8)
    other = cell("/o", [0.0, 2.0], [0.020] * 8)
    pairs = same_work_apart([morning, evening, other, cell("/m", [0.0, 1.0], [0.010] * 8)])
    assert len(pairs) == 1
    p = per_step([[(morning.reals[0].steps, None)]], COST, pairs)
    assert p.pairs_apart == 8 and p.real_vs_real_apart == pytest.approx(0.2)
    assert "served at other times): 20.0% (8 pairs)" in describe(p)
    assert "other times" not in describe(per_step([[(morning.reals[0].steps, None)]], COST))
