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
event like any other.

EventQueue: the Resumptions of a simulation kept apart from SimPy's queue (sim/simulate.py,
pulled open loop), in a heap compared on plain fields, and processed by a compiled loop
(EventQueue.run) merged with SimPy's queue in the one order, (time, priority, turn).
SimPy's heap of tuples compares through Python (about 4,700 instructions a pop among 64
replicas' waits) and Environment.step is Python code an event
(docs/results/2026-12-07-replicas-wake.md). A wait queued there can also be moved
(Resumption.move): a run cut short does not leave its old wait to come due for nothing."""
from __future__ import annotations

import math
from heapq import heappush
from typing import Callable

import simpy

Callback = Callable[[object], None]


class Resumption:
    """A pending call of `callbacks` (each given this object) at the time it was pushed
    for. Environment.step sets `callbacks` to None as it processes it; push() sets them
    again, so that one object serves wait after wait. queue: where it waits (None:
    SimPy's own queue)."""

    def __init__(self, callbacks: list[Callback], queue: EventQueue | None = None) -> None:
        self._callbacks = callbacks
        self.callbacks: list[Callback] | None = None  # None: not on the queue
        self._ok = True  # Environment.step raises a failed event's value: never this
        self.queue = queue
        self.t = 0.0  # queued on `queue`: when due, its priority, its turn (SimPy's
        self.priority = 0  # event counter, env._eid), its place in the heap
        self.turn = 0
        self.slot = -1  # -1: not on `queue`

    def push(self, env: simpy.Environment, t: float, priority: int) -> None:
        """Due at time t, after the events due then of a lower priority or pushed before."""
        self.callbacks = self._callbacks
        turn = next(env._eid)
        if self.queue is None:
            heappush(env._queue, (t, priority, turn, self))
        else:
            self.queue.push(self, t, priority, turn)

    def push_after(self, env: simpy.Environment, delay: float, priority: int) -> None:
        """Due `delay` from now, the time summed as Environment.schedule sums a Timeout's
        (which refuses a negative delay, as this does)."""
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")
        self.push(env, env._now + delay, priority)

    def move(self, env: simpy.Environment, t: float, priority: int, ends_run: bool = True) -> bool:
        """Where it waits on an EventQueue: due at t instead, as a Resumption pushed now
        would be (False: not on one; nothing done). ends_run False: the old wait is one
        the run would never have had (a run priced ahead and cut, sim/engine.py), so the
        run's end does not reach for it (EventQueue.dropped_until)."""
        queue = self.queue
        if queue is None or self.slot < 0:
            return False
        queue.remove(self, ends_run)
        self.push(env, t, priority)
        return True


class EventQueue:
    """Resumptions by (time, priority, turn), a heap on their own fields (module docstring)."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.heap: list[Resumption] = []
        self.processed = 0  # Resumptions called back (sim/counting.py counts them as events)
        # The latest time of a wait taken off the queue (moved) before it came due: it
        # would have moved SimPy's clock there for nothing, and the run's end reads it.
        self.dropped_until = -math.inf

    def first_time(self) -> float:
        """When the earliest is due (inf: none)."""
        return self.heap[0].t if self.heap else math.inf

    def push(self, r: Resumption, t: float, priority: int, turn: int) -> None:
        r.t, r.priority, r.turn = t, priority, turn
        self.heap.append(r)
        self._up(r, len(self.heap) - 1)

    def remove(self, r: Resumption, ends_run: bool = True) -> None:
        heap, i = self.heap, r.slot
        if ends_run and r.t > self.dropped_until:
            self.dropped_until = r.t
        r.slot = -1
        last = heap.pop()
        if i < len(heap):
            if _before(last, r):
                self._up(last, i)
            else:
                self._down(last, i)

    def run(self, stop: Resumption | None = None) -> None:
        """env.run() to the end, these Resumptions and SimPy's events in one order. stop:
        a Resumption on this queue (a window's end, sim/apart.py): the run ends as it
        comes first, taken off unprocessed, the clock where the events before it left it
        (a move to it or past it, moved_to, waits on the queue, as where any event is due)."""
        env, heap = self.env, self.heap
        events: list = env._queue
        while heap or events:
            r = heap[0] if heap else None
            if events and (r is None or _simpy_first(events[0], r)):
                env.step()
                continue
            assert r is not None
            last = heap.pop()
            r.slot = -1
            if heap:
                self._down(last, 0)
            if r is stop:
                return
            env._now = r.t
            callbacks = r.callbacks
            r.callbacks = None
            self.processed += 1
            if callbacks is not None:
                for callback in callbacks:
                    callback(r)
        if self.dropped_until > env._now:  # as if the dropped waits had come due
            env._now = self.dropped_until

    def _up(self, r: Resumption, i: int) -> None:
        heap = self.heap
        while i > 0:
            up = (i - 1) >> 1
            parent = heap[up]
            if not _before(r, parent):
                break
            heap[i] = parent
            parent.slot = i
            i = up
        heap[i] = r
        r.slot = i

    def _down(self, r: Resumption, i: int) -> None:
        heap = self.heap
        n = len(heap)
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            c = heap[child]
            if child + 1 < n and _before(heap[child + 1], c):
                child += 1
                c = heap[child]
            if not _before(c, r):
                break
            heap[i] = c
            c.slot = i
            i = child
        heap[i] = r
        r.slot = i


def _before(a: Resumption, b: Resumption) -> bool:
    if a.t != b.t:
        return a.t < b.t
    return a.priority < b.priority or (a.priority == b.priority and a.turn < b.turn)


def _simpy_first(event: tuple, r: Resumption) -> bool:
    """SimPy's queued (time, priority, turn, event) comes before r."""
    t: float = event[0]
    if t != r.t:
        return t < r.t
    priority: int = event[1]
    if priority != r.priority:
        return priority < r.priority
    turn: int = event[2]
    return turn < r.turn


def moved_on(env: simpy.Environment, delay: float, queue: EventQueue | None = None) -> bool:
    """Move SimPy's clock on by `delay` where no other event is due by then: a timeout
    would be the next event, and resuming at once from it is what this does, without the
    event. Returns False (wait on the queue) where one is due first or at the same time
    (an event scheduled earlier goes first at a tie). The time is SimPy's own sum for a
    timeout, now + delay, so the clock reads the same either way. queue: the
    simulation's EventQueue (above), if any, is looked at as well."""
    return moved_to(env, env._now + delay, queue)


def moved_to(env: simpy.Environment, t: float, queue: EventQueue | None = None) -> bool:
    """moved_on to time t exactly (False: wait on the queue until t)."""
    events = env._queue
    if events and events[0][0] <= t:
        return False
    if queue is not None and queue.heap and queue.heap[0].t <= t:
        return False
    env._now = t
    return True
