"""A step table (steps.csv's columns, core/metrics.py) as step features and as a cost
model's prices: how a measured run's steps are priced wherever they are judged (machine
speed, validation, calibration from served runs)."""
from __future__ import annotations

import numpy as np

from batchlab.core.cost.form import CostModel
from batchlab.core.features import FEATURE_NAMES, StepFeatures

# A measured step over this many times its price had its core taken (a neighbour ran):
# not a measurement of the machine's speed, nor of the cost form (left out of both).
CONTENDED = 2.0


def step_features(steps: dict[str, np.ndarray], mask: np.ndarray | None = None) -> list[StepFeatures]:
    """The (masked) steps' features; a table without the later features: 0."""
    zero = np.zeros(len(steps["duration_s"]), dtype=np.int64)
    cols = [np.asarray(steps.get(n, zero)) for n in FEATURE_NAMES]
    if mask is not None:
        cols = [c[mask] for c in cols]
    return [StepFeatures(*(int(v) for v in row)) for row in zip(*cols)]


def distinct_step_features(steps: dict[str, np.ndarray]) -> tuple[list[StepFeatures], np.ndarray]:
    """(the distinct features among the steps, each step's index into them): a long run
    repeats a few thousand shapes over and over, so pricing each once is far cheaper."""
    n = len(steps["duration_s"])
    zero = np.zeros(n, dtype=np.int64)
    cols = np.column_stack([np.asarray(steps.get(c, zero), dtype=np.int64) for c in FEATURE_NAMES]) \
        if n else np.zeros((0, len(FEATURE_NAMES)), dtype=np.int64)
    rows, inverse = np.unique(cols, axis=0, return_inverse=True)
    return [StepFeatures(*(int(v) for v in row)) for row in rows], inverse.reshape(-1)


def price(steps: dict[str, np.ndarray], cost: CostModel, mask: np.ndarray | None = None) -> np.ndarray:
    """The cost model's price of the (masked) steps, each from its own features (a table
    without the context features after_prefill / after_idle: 0)."""
    return np.array([cost.step_time(f) for f in step_features(steps, mask)], dtype=float)
