"""A scheduler run alone, without the simulator: each step formed, priced, completed at
its end, for tests of what one step does (tests/test_emission_seam.py, test_kv_home_seam.py)."""
from __future__ import annotations

from typing import Callable

from batchlab.core.batch import Batch, step_features
from batchlab.core.features import StepFeatures
from batchlab.core.schedulers.base import Scheduler

# (sequence, start, tokens, tokens generated before the step) per item, as it was formed
Item = tuple


def step_through(sched: Scheduler, price: Callable[[Batch, StepFeatures], float],
                 after: Callable[[Batch, StepFeatures, float, float], None] | None = None,
                 limit: int = 5000) -> list[tuple[Batch, StepFeatures, float, list[Item]]]:
    """Steps until the scheduler has no work: (batch, features, seconds, items) each.
    after(batch, features, start, end) runs once the step completed. After every step
    the KV pool holds exactly the running sequences' blocks."""
    steps, now = [], 0.0
    for _ in range(limit):
        if not sched.has_work():
            break
        batch = sched.schedule(now)
        if batch.is_empty:
            now = sched.next_wakeup(now) or now + 1.0
            continue
        f = step_features(batch)
        dt = price(batch, f)
        items = [(s, start, n, s.num_generated)
                 for s, start, n in zip(batch.seqs, batch.starts, batch.num_tokens)]
        sched.complete(batch, now + dt)
        if after is not None:
            after(batch, f, now, now + dt)
        steps.append((batch, f, dt, items))
        now += dt
        assert sched.kv.num_used == sum(len(s.block_table) for s in sched.running)
    assert not sched.has_work() and sched.kv.num_used == 0
    return steps
