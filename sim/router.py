"""Routing requests across replicas: round_robin, least_loaded, and prefix_aware (to the
replica holding the longest cached prefix of the prompt, balanced against load)."""
from __future__ import annotations

from typing import Callable, Sequence as Seq

from batchlab.core.request import Request
from batchlab.sim.engine import Replica

Router = Callable[[Seq[Replica], Request], Replica]

# prefix_aware falls back to the least loaded replica when the load is this uneven:
# the busiest has more than BALANCE_ABS outstanding requests beyond the idlest and more
# than BALANCE_REL times as many (SGLang's cache-aware router: 32 and 1.5 by default;
# 8 suits the few replicas of a simulation).
BALANCE_ABS, BALANCE_REL = 8, 1.5


def round_robin() -> Router:
    state = {"next": 0}

    def pick(replicas: Seq[Replica], _request: Request) -> Replica:
        r = replicas[state["next"] % len(replicas)]
        state["next"] += 1
        return r
    return pick


def least_loaded() -> Router:
    """Join the shortest queue: fewest outstanding requests (Replica.load), lowest index
    on ties."""
    return lambda replicas, _request: _least_loaded(replicas)


def _least_loaded(replicas: Seq[Replica], loads: list[int] | None = None) -> Replica:
    """min over (load, index), first on ties; loads: each replica's load() where the
    caller has them (else read here). A plain loop (compiled, a key function is a call
    through Python a replica)."""
    best = replicas[0]
    low = best.load() if loads is None else loads[0]
    for i in range(1, len(replicas)):
        r = replicas[i]
        load = r.load() if loads is None else loads[i]
        if load < low or (load == low and r.index < best.index):
            best, low = r, load
    return best


def prefix_aware() -> Router:
    """The replica whose cache holds the longest prefix of the prompt (read through each
    replica's scheduler, as llm-d's precise prefix-cache scorer reads the engines' KV
    events), ties and no hit anywhere to the least loaded; the least loaded outright
    when the load is too uneven (BALANCE_ABS, BALANCE_REL)."""
    def pick(replicas: Seq[Replica], request: Request) -> Replica:
        loads = [r.load() for r in replicas]
        lo, hi = min(loads), max(loads)
        if hi - lo > BALANCE_ABS and hi > BALANCE_REL * lo:
            return _least_loaded(replicas, loads)
        # By position, not index: a pool's replicas need not be numbered from 0.
        best = min(range(len(replicas)), key=lambda i: (
            -replicas[i].scheduler.cached_prefix_tokens(request), loads[i], replicas[i].index))
        return replicas[best]
    return pick


# The routers that read the replicas' state (Replica.load, their caches) at each arrival.
STATE_READING = ("least_loaded", "prefix_aware")

ROUTERS: dict[str, Callable[[], Router]] = {"round_robin": round_robin, "least_loaded": least_loaded,
                                            "prefix_aware": prefix_aware}


def make_router(name: str) -> Router:
    if name not in ROUTERS:
        raise ValueError(f"unknown router {name!r}; expected one of {', '.join(ROUTERS)}")
    return ROUTERS[name]()
