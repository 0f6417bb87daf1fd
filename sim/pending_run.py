"""A replica's fast-forward run priced ahead and applied late (sim/engine.py), where the
router reads the replicas' state at each arrival (least_loaded, prefix_aware).

Which replica an arrival goes to is then known only at the arrival. Cutting every
replica's run there (the rule for any router) made each arrival cost a decision on every
replica. Instead a replica prices its run as if nothing came to it and applies nothing
yet; an arrival routed to it cuts the run at the step in progress (the step a run
planned knowing that arrival would have ended at) and applies the steps up to it, and a
router reads the others' state as of the arrival from the run's known finishes, without
ending their runs. Both are what the replica would have been had every arrival cut its
run: a run's steps are the same however it is cut (the fast-forward is exact), and a
router sees a member's finish only once the finish is past (finished strictly before the
arrival: one at the same instant is seen after it, as stepping orders them)."""
from __future__ import annotations

import math

from batchlab.core.batch import Batch
from batchlab.core.fast_forward import DecodeRun


class PendingRun:
    """Steps 1..last of the run `batch` starts, priced (run; its clock's time 0 the run's
    start, time j the end of step j) and not yet applied. sensitive_from: the first step
    an arrival could join (Scheduler.steady_decode_run); context: the first step's
    (after_prefill, after_idle)."""
    __slots__ = ("batch", "run", "context", "sensitive_from", "last")

    def __init__(self, batch: Batch, run: DecodeRun, context: tuple[int, int],
                 sensitive_from: int, last: int) -> None:
        self.batch, self.run, self.context = batch, run, context
        self.sensitive_from, self.last = sensitive_from, last

    def end(self) -> float:
        """When its last step ends."""
        return self.run.clock.time(self.last)

    def stop_for(self, t: float) -> int:
        """The step a run planned knowing of an arrival at t would end after: the step
        in progress at t, or the last before any an arrival could join if later; at
        most `last`. (t after the run's start: arrivals up to it were pulled before.)"""
        clock = self.run.clock
        m = clock.bisect(t, len(clock))
        if m < self.sensitive_from - 1:
            m = self.sensitive_from - 1
        return m if m < self.last else self.last

    def finished_before(self, t: float) -> int:
        """Members whose last step comes before stop_for(t): those a cut at t finishes
        (the others finish at the step it ends with, or later)."""
        return self.finished_at(self.stop_for(t))

    def finished_at(self, m: int) -> int:
        """finished_before where stop_for gave m."""
        sizes = self.run.num_seqs
        return sizes[0] - sizes[m - 1]

    def steady_until(self, t: float) -> float:
        """A time up to which finished_before stays what it is at t (inf: to the run's
        end): the end of the step before the next one that finishes a member. (Sizes
        only fall: nobody joins a run.)"""
        return self.steady_from(self.stop_for(t), t)

    def steady_from(self, m: int, t: float) -> float:
        """steady_until(t) where stop_for(t) gave m."""
        if m < 1:
            return t  # (not met: t comes after the run's start) read again after t
        sizes, last = self.run.num_seqs, self.last
        size = sizes[m - 1]
        if sizes[last - 1] == size:
            return math.inf
        lo, hi = m + 1, last  # the first m2 in lo..hi with sizes[m2 - 1] < size: finishes at stop_for m2
        while lo < hi:
            mid = (lo + hi) // 2
            if sizes[mid - 1] < size:
                hi = mid
            else:
                lo = mid + 1
        return self.run.clock.time(lo - 1)  # stop_for(t') >= lo only once t' > time(lo - 1)
