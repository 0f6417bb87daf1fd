"""Round-robin replicas run one after another, each to its end (sim/simulate.py).

Round robin deals request i to replica i mod R whatever the replicas' state, and an
arrival wakes only the replica it goes to, so a replica's run depends on its own requests
alone (sim/replica_groups runs groups of them in other processes on that ground).
Interleaved, each decision went to a replica whose state the other replicas' decisions had
pushed out of the caches; run apart, a replica's queues, sequences and KV pool stay in
cache while it runs, and only one replica is alive at a time.

The recorder's tables do not depend on the order in which replicas record: request rows
are sorted by id, steps and gaps by replica then time (core/metrics.py), and its sums are
exact integers; the run's end is the latest of the replicas'. The same runs, to the bit,
as the replicas interleaved (simulate.APART = False; tests/test_apart.py)."""
from __future__ import annotations

import math
from typing import Callable

import simpy

from batchlab.core.metrics import MetricsRecorder
from batchlab.core.request import Request
from batchlab.core.workload import Workload
from batchlab.sim.arrivals import Arrivals
from batchlab.sim.engine import Replica
from batchlab.sim.resumption import EventQueue

Build = Callable[[simpy.Environment, int, Arrivals, EventQueue], Replica]


def run_apart(workload: Workload, replicas: int, build: Build, rec: MetricsRecorder) -> float:
    """Each replica i, built by build(env, i, the arrivals dealt to it, queue), run on its
    own from time 0 to its end, and what it left unfinished recorded (nothing, unless
    its KV pool can never hold a request); returns the latest end (the run's simulated time)."""
    env = simpy.Environment()
    queue = EventQueue(env)
    end = 0.0
    for i in range(replicas):
        env._now = 0.0
        queue.dropped_until = -math.inf
        pulled = Arrivals(env, workload, _nowhere, None, i, replicas)
        pulled.queue = queue
        engine = build(env, i, pulled, queue)
        pulled.submit = engine.submit
        queue.run()
        engine.settle()
        rec.record_requests([*engine.scheduler.running, *engine.scheduler.waiting()], i)
        end = max(end, env._now)
        pulled.submit = _nowhere
        engine.let_go()
    return end


def _nowhere(request: Request, now: float) -> None:
    raise AssertionError("arrivals dealt apart go to their replica")
