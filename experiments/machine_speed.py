"""How fast the machine ran during a real run, measured from the run's own steps priced
by a cost model (a calibration profile): the memory side from its steady decode steps,
the compute side from its compute-bound steps.

Why these steps and not a reference probe timed at idle moments: a probe runs another
kernel than the model's, only while the engine idles (a saturated run has no idle
moment, and the machine's speed while busy is what its latencies carry), and a probe
that overruns delays the next arrival, changing the run it measures. The run's steady
decode steps are measured during the run, on the model's own kernels, and cost nothing
extra; decode-only shapes are the ones a profile prices right once a run's speed is
factored out, so their measured/priced ratio is the machine's speed level, not the
profile's shape error. Steady: decode-only, no preemption, after another decode-only
step (the step right after a prefill costs more) and back to back with it (the first
step after an idle gap costs more).

The two sides drift apart on a shared VM, so one factor cannot carry both. Compute
side: the steps whose price a fitted profile puts mostly in its FLOP terms (a share of
COMPUTE_SHARE or more: prefill chunks of a few hundred tokens), their measured time less
their memory side at the measured factor, over their FLOP terms' price.

Both factors are ratios of sums (the mean step), not medians of ratios, because that is
how calibration levels a profile (calibration/fit/served_steps.py: latencies add steps up, so it
prices the mean served step, and served steps are skewed slow): a median factor reads a
run at its calibration's speed as fast, and the normalised simulation then leans fast.
Steps over CONTENDED x their price (a neighbour took the core) are left out, as
calibration leaves them out; on a machine slower than the profile's (another CPU model
of the same setup) the price is first scaled by the run's own fast level (fast_level),
else every step of a run 2x slower than the profile would count as contended.

A run's one factor is its mean level; on a shared VM the level also moves within a run,
in swings of tens of seconds. `drift` says how much: the same ratio over each
DRIFT_WINDOW_S of the run's clock, p90 - p10 of the windows over the factor, and each
window's level, which the normalised simulation follows on the memory side
(experiments/validation/normalised.py, core/cost/at_speed.py).

This is an observation of a run, so it lives with the code that judges runs: `batchlab
run` and `serve` label a run's meta with it (run_labels.py), validation normalises by it.
Its result is core.run_meta.MachineSpeed, what meta.json records.

factor > 1: the machine ran slower than when the profile was measured. The measurements
behind these choices: docs/results/2026-12-01-speed-normalisation.md."""
from __future__ import annotations

import math

import numpy as np

from batchlab.core.cost.form import CostModel
from batchlab.core.cost.cpu_form import CpuFormModel
from batchlab.core.features import IDLE_GAP_S  # a step starting this long after the last woke from idle
from batchlab.core.cost.fitted import FittedCostModel
from batchlab.core.run_meta import MachineSpeed
from batchlab.core.step_table import CONTENDED, price, step_features

MIN_STEPS = 8  # fewer steady steps than this: fall back to every decode-only step
METHOD = "total measured / total profile price over uncontended steady decode steps"
COMPUTE_SHARE = 0.5  # a step whose FLOP terms are this share of its price is compute-bound
DRIFT_WINDOW_S = 2.0  # the run's clock in windows this long, for the level within the run
MIN_WINDOW_STEPS, MIN_WINDOWS = 30, 4  # a window's level from at least 30 steps; at least 4 windows
COMPUTE_METHOD = ("over uncontended compute-bound steps: (total measured - their memory side at "
                  "the factor) / the price of their FLOP terms")


def steady_decode(steps: dict[str, np.ndarray]) -> np.ndarray:
    """Mask of the steady decode steps of a step table (module docstring)."""
    start, dur = np.asarray(steps["start_s"], float), np.asarray(steps["duration_s"], float)
    decode = (np.asarray(steps["prefill_tokens"]) == 0) & (np.asarray(steps["num_preempted"]) == 0)
    if start.size == 0:
        return decode
    gap = np.concatenate(([np.inf], start[1:] - (start[:-1] + dur[:-1])))
    after_decode = np.concatenate(([False], decode[:-1]))
    return decode & after_decode & (gap <= IDLE_GAP_S) & (dur > 0)


def machine_speed(steps: dict[str, np.ndarray] | None, cost: CostModel | None,
                  source: str = "") -> MachineSpeed:
    """The run's speed as `cost` (described by `source`) prices its steps: factor, spread
    (IQR of the ratios / their median), drift and compute_speed's fields; factor None (and
    why) where it cannot be measured. Its keys keep the order meta.json has always had."""
    out: dict = {"method": METHOD, "profile": source or None, "factor": None, "steps": 0}
    if cost is None:
        return MachineSpeed(**out, why="no profile to price the steps (batchlab run --profile P measures it)")
    if steps is None or not len(steps["start_s"]):
        return MachineSpeed(**out, why="the run kept no step table")
    mask = steady_decode(steps)
    used = "steady decode"
    if mask.sum() < MIN_STEPS:
        mask = (np.asarray(steps["prefill_tokens"]) == 0) & (np.asarray(steps["duration_s"]) > 0)
        used = "all decode-only (too few steady ones)"
    if not mask.any():
        return MachineSpeed(**out, why="the run had no decode-only step")
    predicted = price(steps, cost, mask)
    measured = np.asarray(steps["duration_s"], float)[mask]
    ok = (predicted > 0) & (measured <= CONTENDED * fast_level(measured, predicted) * predicted)
    if not ok.any():
        return MachineSpeed(**out, why="the profile prices its decode steps at 0 s, or every one was contended")
    factor = float(measured[ok].sum() / predicted[ok].sum())
    ratio = measured[ok] / predicted[ok]
    q1, med, q3 = np.percentile(ratio, [25, 50, 75])
    start = np.asarray(steps["start_s"], float)[mask][ok]
    priced = predicted > 0
    counts = {"candidates": int(mask.sum()), "contended": int((priced & ~ok).sum()),
              "total_steps": len(steps["start_s"]),
              "all_factor": round(float(measured[priced].sum() / predicted[priced].sum()), 4)}
    return MachineSpeed(**{**out, "factor": round(factor, 4), "steps": int(ok.sum()), "steps_used": used,
                           **counts,
                           "spread": round(float(q3 - q1) / med, 4) if med > 0 else math.nan,
                           **drift(start, measured[ok], predicted[ok], factor),
                           **compute_speed(steps, cost, round(factor, 4))})


def fast_level(measured: np.ndarray, predicted: np.ndarray) -> float:
    """The run's uncontended speed level over the price, at least 1: the 10th percentile of
    measured/priced (contention only slows steps, so the fastest tenth ran uncontended)."""
    priced = predicted > 0
    if not priced.any():
        return 1.0
    return max(1.0, float(np.percentile(measured[priced] / predicted[priced], FAST_PERCENTILE)))


FAST_PERCENTILE = 10
MOSTLY_CONTENDED = 0.5  # above this share of candidates dropped, the factor is not the run's speed


def describe(ms: MachineSpeed) -> str:
    """How a factor was measured, in words: the steps it used of the run's, and why it
    dropped the others; a warning where most were contended (the uncontended few are not
    how the run went)."""
    if ms.factor is None:
        return f"not measured ({ms.why or 'no profile'})"
    if ms.candidates is None:  # a meta.json written before these counts
        return f"{ms.steps} {ms.steps_used or 'steady decode'} steps"
    kind = "steady decode" if ms.steps_used == "steady decode" else "decode-only (too few steady ones)"
    other = (ms.total_steps or 0) - ms.candidates
    text = (f"{ms.steps} of {ms.total_steps} steps: {other} not {kind} (prefill-bearing, right after a "
            f"prefill or an idle gap, or preempting), {ms.contended} dropped as contended (over "
            f"{CONTENDED:g}x their price at the run's fast level)")
    if ms.candidates and ms.contended > MOSTLY_CONTENDED * ms.candidates:
        text += (f"; WARNING: most {kind} steps were contended, so the machine ran slower than this "
                 f"factor says: all {ms.candidates} of them together ran {ms.all_factor:.2f}x the price")
    return text


def drift(start: np.ndarray, measured: np.ndarray, predicted: np.ndarray, factor: float) -> dict:
    """MachineSpeed's drift, drift_windows, drift_range, drift_levels: how far the level moved
    within the run (module docstring), and each window's level as [start_s, level] (windows
    of DRIFT_WINDOW_S on the run's clock with MIN_WINDOW_STEPS steps or more); drift None
    where the run has fewer than MIN_WINDOWS of them."""
    window = np.floor(start / DRIFT_WINDOW_S).astype(np.int64)
    levels = [(int(w), measured[window == w].sum() / predicted[window == w].sum())
              for w in np.unique(window) if (window == w).sum() >= MIN_WINDOW_STEPS]
    if len(levels) < MIN_WINDOWS:
        return {"drift": None, "drift_windows": len(levels)}
    lo, hi = np.percentile([k for _, k in levels], [10, 90])
    return {"drift": round(float(hi - lo) / factor, 4), "drift_windows": len(levels),
            "drift_range": [round(float(lo), 4), round(float(hi), 4)],
            "drift_levels": [[w * DRIFT_WINDOW_S, round(float(k), 4)] for w, k in levels]}


def compute_speed(steps: dict[str, np.ndarray], cost: CostModel, factor: float) -> dict:
    """MachineSpeed's compute_method, compute_factor, compute_steps, compute_spread: the
    compute side's speed (module docstring) given the memory side's `factor`;
    compute_factor None (and compute_why) where it cannot be measured."""
    out: dict = {"compute_method": COMPUTE_METHOD, "compute_factor": None, "compute_steps": 0}
    if not isinstance(cost, (FittedCostModel, CpuFormModel)):  # the CPU forms split their sides
        return {**out, "compute_why": "the profile's cost form does not separate FLOP terms"}
    at_memory_speed = cost.at_speed(factor)
    feats = step_features(steps)
    total = np.array([at_memory_speed.step_time(f) for f in feats], dtype=float)
    flops = np.array([at_memory_speed.parts(f)[1] for f in feats], dtype=float)
    memory = total - flops  # the rest, context terms included, scales with the memory side
    measured = np.asarray(steps["duration_s"], float)
    bound = (flops > 0) & (flops >= COMPUTE_SHARE * total)
    bound &= measured <= CONTENDED * fast_level(measured[bound], total[bound]) * total
    if bound.sum() < MIN_STEPS:
        return {**out, "compute_steps": int(bound.sum()),
                "compute_why": f"fewer than {MIN_STEPS} compute-bound steps (prefills of a few "
                               f"hundred tokens)"}
    beyond_memory = measured[bound] - memory[bound]
    k = float(beyond_memory.sum() / flops[bound].sum())
    q1, med, q3 = np.percentile(beyond_memory / flops[bound], [25, 50, 75])
    return {**out, "compute_factor": round(k, 4), "compute_steps": int(bound.sum()),
            "compute_spread": round(float(q3 - q1) / med, 4) if med > 0 else math.nan}
