"""Is a run stable (its queue settles) or overloaded (its queue grows through the run)?

Shared by every consumer that must not judge an overloaded run's percentiles as steady
state: validation labels each run with it, capacity searches use it as their stability
test. It reads the request table alone, so it works for simulated and real runs, with or
without a step table.

The queue is the number of requests that have arrived and not yet been scheduled
(rejected ones never queue). Its time average is taken over each quarter of the arrival
span; the first quarter is warm-up (an empty engine fills). A run is overloaded when the
queue rose from the second quarter to the third to the fourth, and the fourth exceeds
1.5 times the second plus one request: a stable queue at any load fluctuates around
a level, an overloaded one climbs by (arrival rate - service rate) x time. A request never
scheduled by the end counts as queued until the last event of the run."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GROWTH_FACTOR = 1.5  # linear growth from empty gives q4/q2 = 7/3
GROWTH_FLOOR = 1.0  # requests: a queue of 0 -> 1 is not growth


@dataclass(frozen=True)
class Stability:
    verdict: str  # "stable" | "overloaded"
    queue_by_quarter: tuple[float, float, float, float]  # time-averaged queue length

    @property
    def stable(self) -> bool:
        return self.verdict == "stable"


def mean_queue(arrival: np.ndarray, scheduled: np.ndarray, t0: float, t1: float) -> float:
    """Time average over [t0, t1] of #{i: arrival_i <= t < scheduled_i}."""
    if t1 <= t0:
        return 0.0
    start = np.clip(arrival, t0, t1)
    end = np.clip(scheduled, t0, t1)
    return float(np.maximum(end - start, 0.0).sum() / (t1 - t0))


def queue_stability(requests: dict[str, np.ndarray]) -> Stability:
    """The verdict for one run's request table (core/metrics.py columns)."""
    keep = requests["status"] != "rejected"
    every = bool(keep.all())  # then the columns themselves (masked copies: the same values)
    arrival = np.asarray(requests["arrival_s"], float)
    scheduled = np.asarray(requests["first_scheduled_s"], float)
    if not every:
        arrival, scheduled = arrival[keep], scheduled[keep]
    if len(arrival) < 4:
        return Stability("stable", (0.0, 0.0, 0.0, 0.0))
    finite = np.isfinite(scheduled)
    if not finite.all():
        finish = np.asarray(requests["finish_s"], float)
        times = np.concatenate([arrival, scheduled[finite], finish if every else finish[keep]])
        scheduled = scheduled.copy()
        scheduled[~finite] = float(np.nanmax(times))
    a0, a1 = float(arrival.min()), float(arrival.max())
    if a1 <= a0:  # everything arrived at once: a batch, not a queue in steady state
        return Stability("stable", (0.0, 0.0, 0.0, 0.0))
    edges = np.linspace(a0, a1, 5)
    q = _mean_queues(arrival, scheduled, list(zip(edges, edges[1:])))
    grows = q[1] <= q[2] <= q[3] and q[3] > GROWTH_FACTOR * q[1] + GROWTH_FLOOR
    return Stability("overloaded" if grows else "stable", q)


def _mean_queues(arrival: np.ndarray, scheduled: np.ndarray,
                 spans: list[tuple[float, float]]) -> tuple[float, float, float, float]:
    """mean_queue over each span, the same floats. Where the arrivals are in time order (a
    simulated run's table), a request queues within [t0, t1) only between the first one
    still unscheduled at t0 and the first arriving at t1: its terms are computed there
    alone, the others being +0.0, and summed as mean_queue sums the whole column (numpy's
    pairwise sum, whose grouping depends on the length alone), with zeros elsewhere."""
    if len(arrival) < 2 or not (arrival[1:] >= arrival[:-1]).all():
        a, b, c, d = (mean_queue(arrival, scheduled, lo, hi) for lo, hi in spans)
        return a, b, c, d
    latest = np.maximum.accumulate(scheduled)  # first i with latest > t0: the first unscheduled at t0
    terms = np.zeros(len(arrival))
    out = []
    for t0, t1 in spans:
        if t1 <= t0:
            out.append(0.0)
            continue
        lo, hi = int(np.searchsorted(latest, t0, "right")), int(np.searchsorted(arrival, t1, "left"))
        if lo >= hi:
            out.append(float(0.0 / (t1 - t0)))
            continue
        np.maximum(np.clip(scheduled[lo:hi], t0, t1) - np.clip(arrival[lo:hi], t0, t1), 0.0, out=terms[lo:hi])
        out.append(float(terms.sum() / (t1 - t0)))
        terms[lo:hi] = 0.0
    return out[0], out[1], out[2], out[3]
