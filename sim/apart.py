"""Round-robin replicas run one after another, each to its end (sim/simulate.py), or, where
Ctrl-C may stop the run and keep what it simulated, window after window of time.

Round robin deals request i to replica i mod R whatever the replicas' state, and an
arrival wakes only the replica it goes to, so a replica's run depends on its own requests
alone (sim/replica_groups runs groups of them in other processes on that ground).
Interleaved, each decision went to a replica whose state the other replicas' decisions had
pushed out of the caches; run apart, a replica's queues, sequences and KV pool stay in
cache while it runs, and only one replica is alive at a time.

Windows (keep_on_interrupt): every replica stays alive, and each runs in turn up to a
window's end (its events due before it; the next window's wait where its clock would move
to it or past it), then the next window. Stopped by Ctrl-C, every replica was simulated at
least to the end of the last window they all completed (the replicas before the one
caught, up to a window further), or, caught in the last replica, to its clock: the run's
simulated_s. The replica caught mid-event is left as the interleaved run leaves one: its
requests recorded as they left, those still running or waiting recorded once, after.

The recorder's tables do not depend on the order in which replicas record: request rows
are sorted by id, steps and gaps by replica then time (core/metrics.py), and its sums are
exact integers; the run's end is the latest of the replicas'. The same runs, to the bit,
as the replicas interleaved (simulate.APART = False; tests/test_apart.py)."""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import simpy

from batchlab.core.request import Request
from batchlab.core.workload import Workload
from batchlab.sim.arrivals import Arrivals
from batchlab.sim.engine import Replica
from batchlab.sim.resumption import EventQueue, Resumption

Build = Callable[[simpy.Environment, int, Arrivals, EventQueue], Replica]

# Requests dealt to a replica in a window: enough decisions that its state, brought into
# the caches once a window, serves many (docs/results/2026-12-07-replicas-wake.md).
PER_WINDOW = 1024
FIRST = -1  # a window's end goes before every event due then (URGENT is 0)


def window_ends(workload: Workload, replicas: int) -> list[float]:
    """The arrival times of requests R * PER_WINDOW, 2 * R * PER_WINDOW, ... (those after
    the first), each once: windows of about PER_WINDOW requests a replica."""
    arrival = workload.arrival
    step = replicas * PER_WINDOW
    ends = np.unique(arrival[step::step]).tolist() if len(arrival) > step else []
    first = float(arrival[0]) if len(arrival) else 0.0
    return [t for t in ends if t > first]


def run_apart(workload: Workload, replicas: int, build: Build,
              ends: Sequence[float] = (), keep_on_interrupt: bool = False) -> tuple[float, bool]:
    """Each replica i, built by build(env, i, the arrivals dealt to it, its queue), run on
    its own from time 0 up to each of `ends` in turn (none: at once), then to its end, and
    what it left unfinished recorded by its recorder (nothing, unless its KV pool can never hold a
    request). Returns the run's simulated time (the latest end) and False, or, where
    Ctrl-C stopped it and keep_on_interrupt keeps what was simulated, the span every
    replica was simulated to (module docstring) and True."""
    env = simpy.Environment()  # one clock, each replica's own set on it in its turn
    engines: list[Replica | None] = [None] * replicas  # built and not yet let go
    queues: list[EventQueue] = []
    clocks = [0.0] * replicas
    end = reached = 0.0  # reached: every replica simulated to at least this
    i = 0
    try:
        for k in range(len(ends) + 1):
            stop = Resumption([], None) if k < len(ends) else None
            for i in range(replicas):
                env._now = clocks[i]
                if k == 0:
                    queues.append(_build(env, workload, replicas, build, engines, i))
                queue = queues[i]
                if stop is not None:  # up to the window's end
                    stop.queue = queue
                    stop.push(env, ends[k], FIRST)
                    queue.run(stop)
                    clocks[i] = env._now
                    continue
                queue.run()
                engine = engines[i]
                assert engine is not None
                engines[i] = None  # its rows below, once
                engine.record_left()
                end = max(end, env._now)
                engine.let_go()
                if engine.pulled is not None:  # (a cycle through its arrivals let go)
                    engine.pulled.submit = _nowhere
            reached = ends[k] if k < len(ends) else math.inf
    except KeyboardInterrupt:
        if not keep_on_interrupt:
            raise
        caught = max(env._now, reached)  # the replica caught: as far as its clock
        for e in engines:  # as the interleaved run's are: rows say what they were doing
            if e is not None:
                e.record_left()
        return (caught if i == replicas - 1 else reached), True
    return end, False


def _build(env: simpy.Environment, workload: Workload, replicas: int, build: Build,
           engines: list[Replica | None], i: int) -> EventQueue:
    """Replica i, pulling the requests dealt to it, on a queue of its own (returned)."""
    queue = EventQueue(env)
    pulled = Arrivals(env, workload, _nowhere, None, i, replicas)
    pulled.queue = queue
    engine = build(env, i, pulled, queue)
    pulled.submit = engine.submit
    engines[i] = engine
    return queue


def _nowhere(request: Request, now: float) -> None:
    raise AssertionError("arrivals dealt apart go to their replica")
