"""A minimal deterministic serving loop over a core scheduler, for tests that check
invariants after every step (the SimPy engine runs the same loop in simulated time)."""
from __future__ import annotations

from typing import Callable

from batchlab.core.batch import Batch
from batchlab.core.request import Request, Sequence
from batchlab.core.schedulers.base import Scheduler

Check = Callable[[Scheduler, Batch, dict], None]


def drive(sched: Scheduler, requests: list[Request], step_time: float = 1.0,
          before: Callable[[Scheduler], dict] | None = None, check: Check | None = None,
          max_steps: int = 200_000) -> tuple[list[Sequence], list[Sequence], int]:
    """Returns (finished in finish order, rejected, steps)."""
    pending = sorted(requests, key=lambda r: (r.arrival, r.id))
    now, i, steps, finished = 0.0, 0, 0, []
    while i < len(pending) or sched.has_work():
        while i < len(pending) and pending[i].arrival <= now:
            sched.add(pending[i], now)
            i += 1
        state = before(sched) if before else {}
        batch = sched.schedule(now)
        if batch.is_empty:
            if not sched.has_work() and i == len(pending):
                break
            wake = sched.next_wakeup(now)
            nxt = [t for t in (wake, pending[i].arrival if i < len(pending) else None) if t is not None]
            assert nxt, "scheduler idle with work left and nothing to wake it: livelock"
            now = max(now, min(nxt))
            continue
        now += step_time
        finished += sched.complete(batch, now)
        steps += 1
        if check:
            check(sched, batch, state)
        assert steps < max_steps, "no progress"
    return finished, sched.rejected, steps
