"""The garbage collector over a simulation (sim/simulate.py): the objects a run sets up
(replicas, their schedulers and KV pools, the workload) live as long as it does, and at
many replicas they are most of the heap. CPython's collector walks the whole heap at each
full collection, and the heap growing as the replicas are built triggered one full
collection after another: at 100,000 replicas that walking, not the simulation, was
most of what grew faster than the replicas (docs/results/2026-12-06-replicas-wake.md).

long_lived(): the collector paused while they are built (they make no garbage cycles),
then frozen (gc.freeze: left out of every collection) while the run goes on, and given
back to the collector when it ends. What the run itself allocates is collected as usual
by the young generations; a full collection (the oldest generation: what the run keeps
alive, a request in flight, a queued wake-up) comes after FULL_EVERY collections of the
middle one instead of 10: at 100,000 replicas 15 of them took 5.7 of the run's 13 CPU-s;
and a young collection after YOUNG allocations (or YOUNG_A_REPLICA a replica) instead of 700.
A run makes next to no cyclic garbage for them to find (the results doc measures it).
Where the caller turned the collector off or froze objects itself, nothing is changed."""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Callable, Iterator

FULL_EVERY = 1000  # collections of generation 1 between full ones, during a run (CPython: 10)
# Container allocations (less deallocations) between young collections during a run
# (CPython: 700). A run's first touch of each replica allocates its lasting lists and
# tuples (queues, block tables, its decode group's entries), which the young collections
# walked again and again: at 100,000 replicas they took a third of the run in 2,347
# collections (docs/results/2026-12-07-replicas-wake.md). Dead objects are freed by
# reference counting as before; only cyclic garbage, which a run barely makes, waits longer.
YOUNG = 100_000
# ... and at least this many a replica: an idle replica still keeps a few containers it
# made on first touch (its scheduler's and decode group's lists), about two, and a busy
# one its requests'; at 100,000 replicas six young collections (0.5 CPU-s, finding no
# garbage) walked them. Cyclic garbage may wait that long: a few objects a replica,
# beside the thousands each one holds.
YOUNG_A_REPLICA = 8


@contextmanager
def long_lived(replicas: int = 1) -> Iterator[Callable[[], None]]:
    """Around the set-up and the run (of `replicas` replicas): the collector is paused
    while the run's objects are built; `settled`, what this yields, freezes them before
    the run. Use as:

        with long_lived() as settled:
            ...build...
            settled()
            ...run...
    """
    if not gc.isenabled() or gc.get_freeze_count():
        yield _nothing
        return
    frozen: list[bool] = []
    thresholds = gc.get_threshold()

    def settled() -> None:
        gc.enable()
        gc.freeze()
        young = max(thresholds[0], YOUNG, YOUNG_A_REPLICA * replicas)
        gc.set_threshold(young, thresholds[1], max(thresholds[2], FULL_EVERY))
        frozen.append(True)
    gc.disable()
    try:
        yield settled
    finally:
        gc.enable()
        if frozen:
            gc.set_threshold(*thresholds)
            gc.unfreeze()


def _nothing() -> None:
    pass
