"""Time outside forward passes in a real run, and the simulator's correction for it.

The real driver stamps a step from just before the engine builds its inputs to just
after it samples; between one step's end and the next one's start it runs
Scheduler.complete, records metrics, releases arrivals and forms the next batch. That gap
is what the simulator does not price (its steps are back to back). It is measured here
from the step table: gaps while work was in the system (a request arrived and not yet
finished), which excludes idle sleeps, fitted as gap = per_step + per_seq * num_seqs of
the step that follows (forming a batch costs per sequence in it)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from core.result import RunResult


def busy_gaps(run: RunResult) -> tuple[np.ndarray, np.ndarray]:
    """(gap seconds, num_seqs of the following step) for every pair of consecutive
    steps with a request in the system at the end of the first."""
    st, rq = run.steps, run.requests
    if len(st["start_s"]) < 2:
        return np.zeros(0), np.zeros(0)
    end = st["start_s"][:-1] + st["duration_s"][:-1]
    gap = st["start_s"][1:] - end
    arrivals = np.sort(rq["arrival_s"])
    finish = np.sort(np.where(np.isnan(rq["finish_s"]), np.inf, rq["finish_s"]))
    in_system = (np.searchsorted(arrivals, end, side="right")
                 - np.searchsorted(finish, end, side="right"))
    busy = in_system > 0
    return gap[busy], st["num_seqs"][1:][busy].astype(float)


@dataclass(frozen=True)
class Overhead:
    """Seconds outside the step per step: per_step + per_seq * num_seqs."""
    per_step_s: float
    per_seq_s: float
    mean_gap_s: float  # mean measured busy gap
    gaps: int  # how many gaps it was fitted on

    def as_dict(self) -> dict:
        return {"per_step_ms": self.per_step_s * 1e3, "per_seq_ms": self.per_seq_s * 1e3,
                "mean_gap_ms": self.mean_gap_s * 1e3, "gaps": self.gaps}


def fit_overhead(run: RunResult) -> Overhead:
    """Least squares (the mean matters: it adds up over a run), per-seq term clipped at 0."""
    gap, seqs = busy_gaps(run)
    if gap.size == 0:
        return Overhead(0.0, 0.0, 0.0, 0)
    mean = float(gap.mean())
    if gap.size >= 3 and np.ptp(seqs) > 0:
        slope, icpt = np.polyfit(seqs, gap, 1)
        if slope > 0 and icpt >= 0:
            return Overhead(float(icpt), float(slope), mean, int(gap.size))
    return Overhead(mean, 0.0, mean, int(gap.size))


def outside_forward(real: RunResult) -> dict[str, float]:
    """Where the real run's wall time went (driver metadata), with shares of the wall."""
    m = real.meta
    wall = float(m.get("wall_s", math.nan))
    steps = int(m.get("steps", len(real.steps["start_s"])))
    parts = {"forward_s": m.get("engine_forward_s", math.nan),
             "input_prep_s": m.get("engine_prepare_s", math.nan),
             "scheduler_overhead_s": m.get("scheduler_overhead_s", math.nan),
             "idle_s": m.get("idle_s", math.nan)}
    out: dict[str, float] = {"wall_s": wall, "steps": steps, **parts}
    for k, v in parts.items():
        out[k[:-2] + "_share"] = v / wall if wall else math.nan
    out["outside_forward_ms_per_step"] = (
        1e3 * (parts["input_prep_s"] + parts["scheduler_overhead_s"]) / steps if steps else math.nan)
    return out
