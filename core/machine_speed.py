"""How fast the machine ran during a real run, measured from the run's own steady decode
steps priced by a cost model (a calibration profile).

Why these steps and not a reference probe timed at idle moments: a probe runs another
kernel than the model's, only while the engine idles (a saturated run has no idle
moment, and the machine's speed while busy is what its latencies carry), and a probe
that overruns delays the next arrival, changing the run it measures. The run's steady
decode steps are measured during the run, on the model's own kernels, and cost nothing
extra; decode-only shapes are the ones a profile prices right (within 4% once a run's
speed is factored out, docs/validation.md), so their measured/priced ratio is the
machine's speed level, not the profile's shape error. Steady: decode-only, no
preemption, after another decode-only step (the step right after a prefill costs more)
and back to back with it (the first step after an idle gap costs more).

factor > 1: the machine ran slower than when the profile was measured."""
from __future__ import annotations

import math

import numpy as np

from core.batch import FEATURE_NAMES, StepFeatures
from core.cost import CostModel

IDLE_GAP_S = 0.002  # a step starting this long after the previous one ended woke from idle
MIN_STEPS = 8  # fewer steady steps than this: fall back to every decode-only step
METHOD = "median of measured / profile price over steady decode steps"


def steady_decode(steps: dict[str, np.ndarray]) -> np.ndarray:
    """Mask of the steady decode steps of a step table (module docstring)."""
    start, dur = np.asarray(steps["start_s"], float), np.asarray(steps["duration_s"], float)
    decode = (np.asarray(steps["prefill_tokens"]) == 0) & (np.asarray(steps["num_preempted"]) == 0)
    if start.size == 0:
        return decode
    gap = np.concatenate(([np.inf], start[1:] - (start[:-1] + dur[:-1])))
    after_decode = np.concatenate(([False], decode[:-1]))
    return decode & after_decode & (gap <= IDLE_GAP_S) & (dur > 0)


def price(steps: dict[str, np.ndarray], cost: CostModel, mask: np.ndarray) -> np.ndarray:
    """The cost model's price of the masked steps, each from its own features (a table
    without the context features after_prefill / after_idle: 0)."""
    zero = np.zeros(len(steps["duration_s"]), dtype=np.int64)
    cols = [np.asarray(steps.get(n, zero))[mask] for n in FEATURE_NAMES]
    return np.array([cost.step_time(StepFeatures(*(int(v) for v in row))) for row in zip(*cols)],
                    dtype=float)


def machine_speed(steps: dict[str, np.ndarray] | None, cost: CostModel | None,
                  source: str = "") -> dict:
    """{"factor", "method", "steps", "spread" (IQR of the ratios / factor), "profile"};
    factor None (and "why") where it cannot be measured."""
    out: dict = {"method": METHOD, "profile": source or None, "factor": None, "steps": 0}
    if cost is None:
        return {**out, "why": "no profile to price the steps (batchlab run --profile P measures it)"}
    if steps is None or not len(steps["start_s"]):
        return {**out, "why": "the run kept no step table"}
    mask = steady_decode(steps)
    used = "steady decode"
    if mask.sum() < MIN_STEPS:
        mask = (np.asarray(steps["prefill_tokens"]) == 0) & (np.asarray(steps["duration_s"]) > 0)
        used = "all decode-only (too few steady ones)"
    if not mask.any():
        return {**out, "why": "the run had no decode-only step"}
    predicted = price(steps, cost, mask)
    ok = predicted > 0
    ratio = np.asarray(steps["duration_s"], float)[mask][ok] / predicted[ok]
    if not ratio.size:
        return {**out, "why": "the profile prices its decode steps at 0 s"}
    factor = float(np.median(ratio))
    q1, q3 = np.percentile(ratio, [25, 75])
    return {**out, "factor": round(factor, 4), "steps": int(ratio.size), "steps_used": used,
            "spread": round(float(q3 - q1) / factor, 4) if factor > 0 else math.nan}
