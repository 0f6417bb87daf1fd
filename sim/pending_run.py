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

from bisect import bisect_left

from batchlab.core.batch import Batch
from batchlab.core.fast_forward import DecodeRun


class PendingRun:
    """Steps 1..last of the run `batch` starts, priced (run, times: times[0] its start,
    times[j] the end of step j) and not yet applied. sensitive_from: the first step an
    arrival could join (Scheduler.steady_decode_run); context: the first step's
    (after_prefill, after_idle)."""
    __slots__ = ("batch", "run", "times", "context", "sensitive_from", "last")

    def __init__(self, batch: Batch, run: DecodeRun, times: list[float], context: tuple[int, int],
                 sensitive_from: int, last: int) -> None:
        self.batch, self.run, self.times, self.context = batch, run, times, context
        self.sensitive_from, self.last = sensitive_from, last

    def stop_for(self, t: float) -> int:
        """The step a run planned knowing of an arrival at t would end after: the step
        in progress at t, or the last before any an arrival could join if later; at
        most `last`. (t after the run's start: arrivals up to it were pulled before.)"""
        m = bisect_left(self.times, t, 0, len(self.times) - 1)
        if m < self.sensitive_from - 1:
            m = self.sensitive_from - 1
        return m if m < self.last else self.last

    def finished_before(self, t: float) -> int:
        """Members whose last step comes before stop_for(t): those a cut at t finishes
        (the others finish at the step it ends with, or later)."""
        sizes = self.run.num_seqs
        return sizes[0] - sizes[self.stop_for(t) - 1]
