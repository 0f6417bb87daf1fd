"""Same-instant ordering. SimPy runs events due at the same time by priority, then in
the order they were scheduled. Arrivals go first (URGENT) and a woken engine decides
last (LATE), so a burst of requests arriving together is seen whole, in both the
step-by-step and the fast-forward engine."""
from __future__ import annotations

import importlib
from contextlib import contextmanager
from typing import Iterator

import simpy
from simpy.events import URGENT, Event

LATE = 2  # after URGENT (0) and NORMAL (1)


class Delay(Event):
    """A timeout with an explicit priority."""

    def __init__(self, env: simpy.Environment, delay: float, priority: int) -> None:
        super().__init__(env)
        self._ok, self._value = True, None
        env.schedule(self, priority, delay)


def urgent(env: simpy.Environment, delay: float) -> Delay:
    return Delay(env, delay, URGENT)


def late(env: simpy.Environment) -> Delay:
    """Resume after everything else due now, including what that schedules now."""
    return Delay(env, 0.0, LATE)


@contextmanager
def counting_events() -> Iterator[list[int]]:
    """Count the events SimPy processes inside the block (for benchmarks and tests of
    fast-forward): `with counting_events() as n: ...; n[0]`."""
    count = [0]
    real_step = simpy.Environment.step

    def step(env: simpy.Environment) -> None:
        count[0] += 1
        real_step(env)
    simpy.Environment.step = step
    try:
        yield count
    finally:
        simpy.Environment.step = real_step


@contextmanager
def counting_decisions() -> Iterator[list[int]]:
    """Count engine iterations (each records one step or one fast-forward run) of the
    simulations run inside the block: the recorders' own count (compiled, their methods
    cannot be wrapped)."""
    module = importlib.import_module("batchlab.sim.simulate")  # the package's `simulate` is the function
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
