"""A cost model that changes with the clock, as a shared machine's speed does within a run:
one model per window of the run's clock (a profile at the level the machine ran at in that
window, measured on a real run's steady decodes: core.machine_speed.drift, windows of
DRIFT_WINDOW_S). The simulation asks `at(now)` for the model that prices a step, or a
fast-forwarded run of decodes, starting at `now` (sim/engine.py); so a run replayed this way
follows the real run's speed over time, where one factor per run keeps the drift (measured on
this project's VMs: a median 11-30% within a run). Before the first window, and in windows
with too few steps to measure, the model of the window before (or the first) applies; a
caller without a clock gets `mean`, the run's one factor."""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from batchlab.core.batch import StepFeatures
from batchlab.core.cost import CostModel, decode_run_times


@dataclass(frozen=True)
class DriftingCost:
    starts: tuple[float, ...]  # each window's start on the run's clock, ascending
    models: tuple[CostModel, ...]  # the price in each window
    mean: CostModel  # the price at the run's mean level

    def __post_init__(self) -> None:
        if not self.starts or len(self.starts) != len(self.models) or list(self.starts) != sorted(self.starts):
            raise ValueError("DriftingCost needs one model per window start, starts ascending")

    def at(self, now: float) -> CostModel:
        return self.models[max(0, bisect_right(self.starts, now) - 1)]

    def step_time(self, f: StepFeatures) -> float:
        return self.mean.step_time(f)

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        return decode_run_times(self.mean, f, m)
