"""The garbage collector over a simulation (sim/simulate.py): the objects a run sets up
(replicas, their schedulers and KV pools, the workload) live as long as it does, and at
many replicas they are most of the heap. CPython's collector walks the whole heap at each
full collection, and the heap growing as the replicas are built triggered one full
collection after another: at 100,000 replicas that walking, not the simulation, was
most of what grew faster than the replicas (docs/results/2026-12-06-replicas-wake.md).

long_lived(): the collector paused while they are built (they make no garbage cycles),
then frozen (gc.freeze: left out of every collection) while the run goes on, and given
back to the collector when it ends. What the run itself allocates is collected as usual.
Where the caller turned the collector off or froze objects itself, nothing is changed."""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def long_lived() -> Iterator[Callable[[], None]]:
    """Around the setup and run: yields to build the run's objects, with the collector
    paused; `settled()` below freezes them. Use as:

        with long_lived() as settled:
            ...build...
            settled()
            ...run...
    """
    if not gc.isenabled() or gc.get_freeze_count():
        yield _nothing
        return
    frozen: list[bool] = []

    def settled() -> None:
        gc.enable()
        gc.freeze()
        frozen.append(True)
    gc.disable()
    try:
        yield settled
    finally:
        gc.enable()
        if frozen:
            gc.unfreeze()


def _nothing() -> None:
    pass
