"""The arrival process: sends each request to the router at its time.

Arrivals are scheduled URGENT, ahead of engine steps ending at the same instant, so the
rule is simple and the same whether the engine steps or fast-forwards: a request that
arrives at t is visible to the scheduler's decision at t (see sim/events.py).

Open loop without a front end, arrivals need no event of their own (`pulled`): the engines
pull the requests due (`pull(now)`) each time one of them resumes, before anything else it
does at that instant, and an idle engine sleeps until the next arrival. Every resumption of
any process at time t pulls what is due by t first, so a request is routed and queued in
the state it would have met at its own instant: the same rule, one SimPy event fewer a
request.

With a front end (core/front_end.py: a server's HTTP side, from a profile fitted on client
timings) a request sent at t reaches the engine at its front-end exit, keeping t as its
arrival, so that its latencies are from the send, as a client measures them."""
from __future__ import annotations

import heapq
import math
from typing import Callable, Protocol, Sequence as Seq

import simpy
from simpy.events import NORMAL, URGENT

from batchlab.core.front_end import FrontEnd
from batchlab.core.request import Request, Sequence
from batchlab.core.workload import Workload
from batchlab.sim.dealt import dealt_block
from batchlab.sim.events import urgent
from batchlab.sim.resumption import EventQueue, Resumption


class Engine(Protocol):
    """What deal_to hands requests to (sim/engine.py's Replica; not imported: it imports this)."""

    def submit(self, request: Request, now: float) -> None: ...


BLOCK = 1024  # requests made at a time from the workload's columns (pull)
PULL = True  # False: a process sends every request (the reference pulling must equal)
DEALT_ALARM = True  # False: each dealt engine asleep keeps an alarm of its own (sleep's reference)


class Arrivals:
    """Open loop: request i is sent at workload.arrival[i]. Closed loop (max_concurrency):
    at most that many in flight; a request is sent at max(its arrival, a free slot),
    a slot freeing think_time_s after a reply."""

    def __init__(self, env: simpy.Environment, workload: Workload,
                 submit: Callable[[Request, float], None], front_end: FrontEnd | None = None,
                 first: int = 0, every: int = 1) -> None:
        """submit(request, now): hand `request` to the engines at `now` (its own instant).
        first, every: only the workload's requests first, first + every, ... (pulled, open
        loop: those round robin deals to one replica of `every`, run apart: sim/apart.py), as
        requests 0, 1, ... here, each with its own id."""
        self.env, self.workload, self.submit = env, workload, submit
        self._first, self._every = first, every
        self.front_end = None if front_end is None or front_end.empty else front_end
        self._last_exit = -math.inf  # when the front end last handed a request on
        self._in_front: list[float] = []  # exits of the requests in the front end (a heap)
        self._n = max(0, -(-(len(workload) - first) // every))  # its __len__ is a call through Python
        self._next_time = self._arrival(0) if self._n else math.inf
        self._block: list[Request] = []  # pulled: requests made ahead, BLOCK at a time, last first
        self._block_end = 0  # the index (of those handed on here) after the last one made
        limit = workload.max_concurrency
        self._slots = simpy.Container(env, init=limit, capacity=limit) if limit else None
        self._releases: list[float] = []  # times at which held slots come free
        self._alarm: Resumption | None = None  # pull_at_each_arrival's event
        self.queue: EventQueue | None = None  # where it waits (sim/resumption.py; None: SimPy's)
        self._engines: list[Engine] = []  # deal_to's (empty: `submit` hands each on)
        self._dealt = 0  # requests handed to them
        # Dealt to engines: which sleep until their next request (sleep()), and one alarm
        # at the earliest such request's arrival (its index: _sleepers_for; none: _n).
        self.asleep: list[bool] = []
        self._sleepers: Resumption | None = None
        self._sleepers_for = self._n
        # Open loop, no front end: the engines pull (module docstring); else a process sends.
        self.pulled = PULL and self._slots is None and self.front_end is None
        if not self.pulled:
            assert every == 1, "only pulled arrivals are dealt apart"
            self._next_time = 0.0 if len(workload) else math.inf
            env.process(self._run())

    def pull(self, now: float) -> None:
        """Hand on every request due by `now`, in order, each at its own arrival time."""
        while self._next_time <= now:
            if not self._block:
                lo = self._block_end
                self._block_end = min(self._n, lo + BLOCK)
                self._block = self._requests(lo, self._block_end)[::-1]
            request = self._block.pop()
            if self._block:
                self._next_time = self._block[-1].arrival
            else:
                i = self._block_end
                self._next_time = self._arrival(i) if i < self._n else math.inf
            engines = self._engines
            if engines:
                engines[self._dealt % len(engines)].submit(request, request.arrival)
                self._dealt += 1
            else:
                self.submit(request, request.arrival)

    def deal_to(self, engines: Seq[Engine]) -> None:
        """Pulled: request k (in order) goes to engines[k mod len(engines)], as the
        round-robin router picks, called natively rather than through `submit` and the
        router (two calls through Python a request)."""
        self._engines = list(engines)
        self.asleep = [False] * len(engines)
        self._sleepers = Resumption([self._sleepers_due], self.queue)

    def sleep(self, k: int, now: float) -> bool:
        """Dealt engine k goes idle at `now` until its next request: the sleepers' one
        alarm, at the earliest of their next arrivals, wakes it (an alarm each, at 100,000
        replicas, made a heap of 100,000 waits). The engine clears asleep[k] as it wakes.
        False: it keeps an alarm of its own (as before: at now + (arrival - now), which
        here would miss the arrival's time by an ulp)."""
        assert self.queue is not None and self._sleepers is not None
        if not DEALT_ALARM:
            return False
        j = self._next_index_for(k, len(self._engines))
        if j < self._n:
            t = self._time_of(j)
            if now + (t - now) != t:
                return False
            if j < self._sleepers_for:
                self._wake_sleepers_at(j, t)
        self.asleep[k] = True
        return True

    def _wake_sleepers_at(self, j: int, t: float) -> None:
        """The sleepers' one alarm set for request j, arriving at t."""
        alarm = self._sleepers
        assert alarm is not None
        self._sleepers_for = j
        if not alarm.move(self.env, t, NORMAL):
            alarm.push(self.env, t, NORMAL)

    def _sleepers_due(self, _event: object) -> None:
        """The sleepers' alarm: what is due handed on (waking those it goes to), and the
        alarm set again for the next request that goes to a sleeper (among the next
        len(engines), where every engine comes once)."""
        self._sleepers_for = self._n
        self.pull(self.env._now)
        asleep, every = self.asleep, len(self.asleep)
        j = self._block_end - len(self._block)
        end = min(self._n, j + every)
        k = j % every
        while j < end:
            if asleep[k]:  # (a rejection in the pull may have set the alarm: sleep())
                self._wake_sleepers_at(j, self._time_of(j))
                return
            j += 1
            k = k + 1 if k + 1 < every else 0

    def next_time_for(self, first: int, every: int) -> float:
        """next_time() among requests first, first + every, ... only: the next one a
        round-robin router sends to its replica `first` of `every` (pulled, open loop)."""
        j = self._next_index_for(first, every)
        return self._time_of(j) if j < self._n else math.inf

    def _next_index_for(self, first: int, every: int) -> int:
        """The next request not pulled yet among first, first + every, ... (may be past
        the workload's end)."""
        n = self._block_end - len(self._block)  # requests pulled so far
        return n + (first - n) % every

    def _time_of(self, j: int) -> float:
        """Request j's arrival (j not pulled yet)."""
        if j < self._block_end:  # made already: its request's arrival, not a numpy scalar's
            return self._block[self._block_end - 1 - j].arrival
        return self._arrival(j)

    def time_ahead(self, n: int) -> float:
        """When the n-th request not yet pulled (n >= 1) arrives (inf: none)."""
        j = self._block_end - len(self._block) + n - 1
        return self._arrival(j) if j < self._n else math.inf

    def _arrival(self, j: int) -> float:
        """Request j's arrival time, from the workload's column."""
        return float(self.workload.arrival[self._first + self._every * j])

    def _requests(self, lo: int, hi: int) -> list[Request]:
        """Requests lo..hi-1 (of those this hands on) made from the workload's columns."""
        if self._every == 1:
            return self.workload.request_block(lo, hi)
        return dealt_block(self.workload, self._first + self._every * lo, self._every, hi - lo)

    def pull_at_each_arrival(self) -> None:
        """Keep an event at the next arrival's time, which pulls it (pulled, open loop): a
        router that reads the replicas' state reads it at the arrival's own instant, where
        no replica's run need end (sim/pending_run.py)."""
        self._alarm = Resumption([self._alarm_due], self.queue)
        if self._next_time < math.inf:
            self._alarm.push(self.env, self._next_time, URGENT)

    def _alarm_due(self, _event: object) -> None:
        self.pull(self.env._now)
        alarm = self._alarm
        if alarm is not None and self._next_time < math.inf:
            alarm.push(self.env, self._next_time, URGENT)

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
                self.submit(request, env.now)
            else:
                self._last_exit = self.front_end.exit_after(self._last_exit, env.now)
                heapq.heappush(self._in_front, self._last_exit)
                env.process(self._hand_on(request, self._last_exit))
        self._next_time = math.inf

    def _hand_on(self, request: Request, exit_s: float):
        """The front end hands `request` to the engine at `exit_s` (exits come in send order)."""
        yield urgent(self.env, exit_s - self.env.now)
        heapq.heappop(self._in_front)
        self.submit(request, self.env.now)
