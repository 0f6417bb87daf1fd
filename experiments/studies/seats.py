"""Seats over a run: a step observer for sim.simulate that records which request holds
which seat, and the share of seats computing per time bin.

Schedulers have no seat numbers (a seat is a place in `running`), so seats here are
for the picture: a request takes the lowest free seat the first time it runs and keeps
it until it finishes or is preempted. A seat is "held" while its request is admitted
and unfinished, and "computed" in a step when its request ran in that step: the two
differ in continuous batching's prefill-only steps, where decodes wait."""
from __future__ import annotations

import numpy as np

from batchlab.core.batch import Batch


class SeatTracker:
    def __init__(self, seats: int, max_steps: int) -> None:
        self.seats, self.max_steps = seats, max_steps
        self._holder = [-1] * seats
        self._seat_of: dict[int, int] = {}
        self._rows: list[list[int]] = []
        self._ran: list[list[bool]] = []
        self.held_total = 0  # seat-steps held, over all steps (not only the recorded ones)
        self.steps = 0

    def __call__(self, replica: int, start: float, duration: float, batch: Batch) -> None:
        for seq in batch.preempted:  # evicted while forming this step: the seat is free
            self._release(seq.id)
        ran = set()
        for seq in batch.seqs:
            ran.add(seq.id)
            if seq.id not in self._seat_of:
                seat = self._holder.index(-1)  # ValueError would mean more running than seats
                self._holder[seat] = seq.id
                self._seat_of[seq.id] = seat
        self.held_total += len(self._seat_of)
        self.steps += 1
        if len(self._rows) < self.max_steps:
            self._rows.append(list(self._holder))
            self._ran.append([h in ran for h in self._holder])
        for seq in batch.seqs:  # complete() has run: finished sequences leave after the step
            if seq.done:
                self._release(seq.id)

    def _release(self, rid: int) -> None:
        seat = self._seat_of.pop(rid, None)
        if seat is not None:
            self._holder[seat] = -1

    @property
    def occupancy(self) -> float:
        """Mean share of seats held by an admitted, unfinished request, over steps."""
        return self.held_total / (self.steps * self.seats) if self.steps else float("nan")

    def grid(self) -> tuple[np.ndarray, np.ndarray]:
        """([steps, seats] request ids, -1 = empty; [steps, seats] ran this step)."""
        return (np.array(self._rows, dtype=np.int64).reshape(-1, self.seats),
                np.array(self._ran, dtype=bool).reshape(-1, self.seats))


def utilisation_over_time(start: np.ndarray, duration: np.ndarray, used: np.ndarray,
                          seats: float, bin_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Seat utilisation per time bin, weighted by time (idle time counts as 0).
    Returns (bin centres in s, utilisation in [0, 1])."""
    if len(start) == 0:
        return np.zeros(0), np.zeros(0)
    end = start + duration
    after = np.cumsum(used * duration)
    before = after - used * duration
    # Busy seat-seconds is piecewise linear: rising within steps, flat in idle gaps.
    t = np.column_stack([start, end]).ravel()
    c = np.column_stack([before, after]).ravel()
    edges = np.arange(0.0, end[-1] + bin_s, bin_s)
    busy = np.interp(edges, t, c, left=0.0, right=c[-1])
    return (edges[:-1] + edges[1:]) / 2, np.diff(busy) / (seats * np.diff(edges))
