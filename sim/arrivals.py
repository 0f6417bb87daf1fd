"""The arrival process: sends each request to the router at its time.

Arrivals are scheduled URGENT, ahead of engine steps ending at the same instant, so the
rule is simple and the same whether the engine steps or fast-forwards: a request that
arrives at t is visible to the scheduler's decision at t (see sim/events.py).

With a front end (core/front_end.py: a server's HTTP side, from a profile fitted on client
timings) a request sent at t reaches the engine at its front-end exit, keeping t as its
arrival, so that its latencies are from the send, as a client measures them."""
from __future__ import annotations

import heapq
import math
from typing import Callable

import simpy

from batchlab.core.front_end import FrontEnd
from batchlab.core.request import Request, Sequence
from batchlab.core.workload import Workload
from batchlab.sim.events import urgent


class Arrivals:
    """Open loop: request i is sent at workload.arrival[i]. Closed loop (max_concurrency):
    at most that many in flight; a request is sent at max(its arrival, a free slot),
    a slot freeing think_time_s after a reply."""

    def __init__(self, env: simpy.Environment, workload: Workload,
                 submit: Callable[[Request], None], front_end: FrontEnd | None = None) -> None:
        self.env, self.workload, self.submit = env, workload, submit
        self.front_end = None if front_end is None or front_end.empty else front_end
        self._last_exit = -math.inf  # when the front end last handed a request on
        self._in_front: list[float] = []  # exits of the requests in the front end (a heap)
        self._next_time = 0.0 if len(workload) else math.inf
        limit = workload.max_concurrency
        self._slots = simpy.Container(env, init=limit, capacity=limit) if limit else None
        self._releases: list[float] = []  # times at which held slots come free
        env.process(self._run())

    @property
    def closed_loop(self) -> bool:
        return self._slots is not None

    def next_time(self) -> float:
        """The earliest time at which another request may reach the engine (inf: never,
        unless a reply frees a closed-loop slot first). A send is a bound for its exit."""
        t = min(self._next_time, self._releases[0]) if self._releases else self._next_time
        return min(t, self._in_front[0]) if self._in_front else t

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
            request = w.request(i, arrival=env.now if self._slots is not None else None)
            if self.front_end is None:
                self.submit(request)
            else:
                self._last_exit = self.front_end.exit_after(self._last_exit, env.now)
                heapq.heappush(self._in_front, self._last_exit)
                env.process(self._hand_on(request, self._last_exit))
        self._next_time = math.inf

    def _hand_on(self, request: Request, exit_s: float):
        """The front end hands `request` to the engine at `exit_s` (exits come in send order)."""
        yield urgent(self.env, exit_s - self.env.now)
        heapq.heappop(self._in_front)
        self.submit(request)
