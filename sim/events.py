"""Running the SimPy world, and same-instant ordering.

run_to_end runs it until nothing is left to do (Ctrl-C may keep what was simulated).

Same-instant ordering. SimPy runs events due at the same time by priority, then in
the order they were scheduled. Arrivals go first (URGENT) and a woken engine decides
last (LATE), so a burst of requests arriving together is seen whole, in both the
step-by-step and the fast-forward engine."""
from __future__ import annotations

import simpy
from simpy.events import URGENT, Event

from batchlab.sim.resumption import EventQueue

LATE = 2  # after URGENT (0) and NORMAL (1): a woken engine's priority (sim/engine.py)


def run_to_end(env: simpy.Environment, keep_on_interrupt: bool, queue: EventQueue | None = None) -> bool:
    """env.run() to the end (queue: with the simulation's EventQueue, sim/resumption.py);
    True where Ctrl-C stopped it and keep_on_interrupt keeps what was simulated (a long
    replay), else the interrupt propagates."""
    try:
        if queue is None:
            env.run()
        else:
            queue.run()
    except KeyboardInterrupt:
        if not keep_on_interrupt:
            raise
        return True
    return False


class Delay(Event):
    """A timeout with an explicit priority."""

    def __init__(self, env: simpy.Environment, delay: float, priority: int) -> None:
        super().__init__(env)
        self._ok, self._value = True, None
        env.schedule(self, priority, delay)


def urgent(env: simpy.Environment, delay: float) -> Delay:
    return Delay(env, delay, URGENT)
