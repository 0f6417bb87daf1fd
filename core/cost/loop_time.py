"""The serving loop's time between steps: what a real engine does after one step ends and
before the next starts while it has work (Scheduler.complete, metrics, releasing
arrivals, forming the next batch). A step table's durations leave it out (the driver
times Engine.execute alone); the simulator's steps are back to back, so without it the
simulation runs ahead, by a share of every step that grows as steps get shorter (a GPU's
are a few ms; measured on CPU in docs/results/2026-12-01-calibration-serving.md).

It is measured from a served run's step table: gaps while a request was in the system
(which excludes idle sleeps), fitted as gap = per_step + per_seq * num_seqs of the step
that follows (forming a batch costs per sequence in it). core/cost/at_speed.py adds it to a
cost model, so a simulated step's duration is the loop's period: its start times follow
the real run's, its durations are its step plus the gap after it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.core.result import RunResult


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


def table_gaps(steps: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """busy_gaps from a step table alone (calibrate --from-run reads no requests): the gap
    before every step whose after_idle is 0, i.e. the loop found it work at once."""
    if len(steps["start_s"]) < 2 or "after_idle" not in steps:
        return np.zeros(0), np.zeros(0)
    start, dur = np.asarray(steps["start_s"], float), np.asarray(steps["duration_s"], float)
    gap = start[1:] - (start[:-1] + dur[:-1])
    busy = np.asarray(steps["after_idle"])[1:] == 0
    return gap[busy], np.asarray(steps["num_seqs"])[1:][busy].astype(float)


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


def fit_gaps(gap: np.ndarray, seqs: np.ndarray) -> Overhead:
    """Least squares (the mean matters: it adds up over a run), each term clipped at 0."""
    if gap.size == 0:
        return Overhead(0.0, 0.0, 0.0, 0)
    mean = float(gap.mean())
    if gap.size >= 3 and np.ptp(seqs) > 0:
        slope, icpt = np.polyfit(seqs, gap, 1)
        if slope > 0 and icpt >= 0:
            return Overhead(float(icpt), float(slope), mean, int(gap.size))
    return Overhead(max(mean, 0.0), 0.0, mean, int(gap.size))  # timer noise can make busy gaps overlap


def fit_overhead(run: RunResult) -> Overhead:
    """The loop's time between steps, fitted on the run's busy gaps."""
    return fit_gaps(*busy_gaps(run))
