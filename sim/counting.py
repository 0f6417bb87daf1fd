"""Counters for benchmarks and tests of the fast-forward: the events SimPy processes and
the engine iterations a simulation takes, counted inside a `with` block."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

import simpy

import batchlab.sim.apart  # noqa: F401  (loaded: counting_events patches the modules)
import batchlab.sim.simulate  # noqa: F401


@contextmanager
def counting_events() -> Iterator[list[int]]:
    """Count the events SimPy processes inside the block (for benchmarks and tests of
    fast-forward), and the waits simulations' EventQueues process (sim/resumption.py):
    `with counting_events() as n: ...; n[0]`."""
    count = [0]
    real_step = simpy.Environment.step
    # Where simulations make their queues: interleaved replicas, and replicas run apart.
    modules = [sys.modules["batchlab.sim.simulate"], sys.modules["batchlab.sim.apart"]]
    queues, real_queue = [], modules[0].EventQueue

    def step(env: simpy.Environment) -> None:
        count[0] += 1
        real_step(env)

    def make(*args, **kw):
        queues.append(real_queue(*args, **kw))
        return queues[-1]
    simpy.Environment.step = step
    for module in modules:
        module.EventQueue = make
    try:
        yield count
    finally:
        simpy.Environment.step = real_step
        for module in modules:
            module.EventQueue = real_queue
        count[0] += sum(q.processed for q in queues)


@contextmanager
def counting_decisions() -> Iterator[list[int]]:
    """Count engine iterations (each records one step or one fast-forward run) of the
    simulations run inside the block: the recorders' own count (compiled, their methods
    cannot be wrapped)."""
    module = sys.modules["batchlab.sim.simulate"]  # batchlab.sim.simulate names the function
    recorders, real = [], module.MetricsRecorder

    def make(*args, **kw):
        recorders.append(real(*args, **kw))
        return recorders[-1]
    count = [0]
    module.MetricsRecorder = make
    try:
        yield count
    finally:
        module.MetricsRecorder = real
        count[0] = sum(r.decisions for r in recorders)
