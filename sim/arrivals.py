"""The arrival process: sends each request to the router at its time.

Arrivals are scheduled URGENT, ahead of engine steps ending at the same instant, so the
rule is simple and the same whether the engine steps or fast-forwards: a request that
arrives at t is visible to the scheduler's decision at t (see sim/events.py)."""
from __future__ import annotations

import heapq
import math
from typing import Callable

import simpy

from batchlab.core.request import Request, Sequence
from batchlab.core.workload import Workload
from batchlab.sim.events import urgent


class Arrivals:
    """Open loop: request i is sent at workload.arrival[i]. Closed loop (max_concurrency):
    at most that many in flight; a request is sent at max(its arrival, a free slot),
    a slot freeing think_time_s after a reply."""

    def __init__(self, env: simpy.Environment, workload: Workload,
                 submit: Callable[[Request], None]) -> None:
        self.env, self.workload, self.submit = env, workload, submit
        self._next_time = 0.0 if len(workload) else math.inf
        limit = workload.max_concurrency
        self._slots = simpy.Container(env, init=limit, capacity=limit) if limit else None
        self._releases: list[float] = []  # times at which held slots come free
        env.process(self._run())

    @property
    def closed_loop(self) -> bool:
        return self._slots is not None

    def next_time(self) -> float:
        """The earliest time at which another request may be sent (inf: never, unless a
        reply frees a closed-loop slot first)."""
        return min(self._next_time, self._releases[0]) if self._releases else self._next_time

    def done(self, _seq: Sequence) -> None:
        """A request left (finished or rejected): in a closed loop its user comes back."""
        if self._slots is not None:
            heapq.heappush(self._releases, self.env.now + self.workload.think_time_s)
            self.env.process(self._release())

    def _release(self):
        yield urgent(self.env, self.workload.think_time_s)
        heapq.heappop(self._releases)
        yield self._slots.put(1)

    def _run(self):
        env, w = self.env, self.workload
        for i in range(len(w)):
            self._next_time = float(w.arrival[i])
            if self._next_time > env.now:
                yield urgent(env, self._next_time - env.now)
            if self._slots is not None:
                self._next_time = math.inf  # now only a free slot can send it
                yield self._slots.get(1)
            self.submit(w.request(i, arrival=env.now if self._slots is not None else None))
        self._next_time = math.inf
