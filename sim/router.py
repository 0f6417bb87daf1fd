"""Routing requests across replicas."""
from __future__ import annotations

from typing import Callable, Sequence as Seq

from sim.engine import Replica

Router = Callable[[Seq[Replica]], Replica]


def round_robin() -> Router:
    state = {"next": 0}

    def pick(replicas: Seq[Replica]) -> Replica:
        r = replicas[state["next"] % len(replicas)]
        state["next"] += 1
        return r
    return pick


def least_loaded() -> Router:
    """Join the shortest queue: fewest outstanding requests, lowest index on ties."""
    return lambda replicas: min(replicas, key=lambda r: (r.outstanding, r.index))


ROUTERS: dict[str, Callable[[], Router]] = {"round_robin": round_robin, "least_loaded": least_loaded}


def make_router(name: str) -> Router:
    if name not in ROUTERS:
        raise ValueError(f"unknown router {name!r}; expected one of {', '.join(ROUTERS)}")
    return ROUTERS[name]()
