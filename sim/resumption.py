"""A replica's waits on SimPy's event queue without a SimPy process (sim/engine.py).

A SimPy process resumes its generator through Process._resume, and each wait is an Event
built by Python code (a Timeout; an idle replica's wake-or-alarm was an AnyOf condition
and three events more). One replica alone moves its clock on with no event at all, but
interleaved replicas each wait on the queue once a decision, and that machinery was about
as costly as the decision itself (docs/results/2026-12-06-replicas-wake.md).

A Resumption is all that Environment.step asks of an event (`callbacks`, `_ok`): pushed
onto the queue as Environment.schedule pushes an event (its time, priority and the next
turn of the same counter), it is processed in SimPy's own order, calling back the replica
that scheduled it. Environment.step, env.run and counting_events (sim/counting.py) see an
event like any other."""
from __future__ import annotations

from heapq import heappush
from typing import Callable

import simpy

Callback = Callable[[object], None]


class Resumption:
    """A pending call of `callbacks` (each given this object) at the time it was pushed
    for. Environment.step sets `callbacks` to None as it processes it; push() sets them
    again, so that one object serves wait after wait."""

    def __init__(self, callbacks: list[Callback]) -> None:
        self._callbacks = callbacks
        self.callbacks: list[Callback] | None = None  # None: not on the queue
        self._ok = True  # Environment.step raises a failed event's value: never this

    def push(self, env: simpy.Environment, t: float, priority: int) -> None:
        """Due at time t, after the events due then of a lower priority or pushed before."""
        self.callbacks = self._callbacks
        heappush(env._queue, (t, priority, next(env._eid), self))

    def push_after(self, env: simpy.Environment, delay: float, priority: int) -> None:
        """Due `delay` from now, the time summed as Environment.schedule sums a Timeout's
        (which refuses a negative delay, as this does)."""
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")
        self.push(env, env._now + delay, priority)
