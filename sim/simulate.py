"""Run a workload through replicas of one scheduler in simulated time."""
from __future__ import annotations

import simpy

from core.config import SchedulerConfig
from core.cost import CostModel
from core.metrics import MetricsRecorder
from core.request import Sequence
from core.result import RunResult
from core.schedulers import make_scheduler
from core.workload import Workload
from sim.engine import Replica
from sim.router import make_router


def simulate(workload: Workload, scheduler: SchedulerConfig, cost: CostModel,
             num_kv_blocks: int, replicas: int = 1, router: str = "round_robin",
             meta: dict | None = None) -> RunResult:
    """Open loop: request i is sent at workload.arrival[i]. Closed loop (max_concurrency):
    at most that many in flight; a request is sent at max(its arrival, a free slot)."""
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    env = simpy.Environment()
    rec = MetricsRecorder()
    pick = make_router(router)
    limit = workload.max_concurrency
    slots = simpy.Container(env, init=limit, capacity=limit) if limit else None

    def release(_seq: Sequence):
        yield env.timeout(workload.think_time_s)
        yield slots.put(1)

    def on_done(seq: Sequence) -> None:
        if slots is not None:
            env.process(release(seq))

    engines = [Replica(env, i, make_scheduler(scheduler, num_kv_blocks), cost, rec, on_done)
               for i in range(replicas)]

    def arrivals():
        for i in range(len(workload)):
            delay = workload.arrival[i] - env.now
            if delay > 0:
                yield env.timeout(delay)
            if slots is not None:
                yield slots.get(1)
            pick(engines).submit(workload.request(i, arrival=env.now if slots else None))

    env.process(arrivals())
    env.run()
    for e in engines:  # nothing should be left; if something is, its row says so
        left = [*e.scheduler.running, *e.scheduler.waiting()]
        rec.record_requests(left, e.index)
    info = {"world": "sim", "policy": scheduler.policy, "replicas": replicas, "router": router,
            "num_kv_blocks": num_kv_blocks, "workload": workload.describe(), **(meta or {})}
    return RunResult.from_recorder(rec, info)
