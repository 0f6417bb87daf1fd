"""Admission orders (who leaves the waiting queue first) and preemption victim choice.

Each is a sort key over a sequence; adding one is one entry here, and every scheduler
and both worlds (sim, backend) pick it up."""
from __future__ import annotations

from typing import Callable

from core.request import Sequence

SortKey = Callable[[Sequence], tuple]

# Smaller key = admitted first. Ties always fall back to arrival, then id: deterministic.
ADMISSION_ORDERS: dict[str, SortKey] = {
    "fcfs": lambda s: (s.request.arrival, s.request.id),
    "priority": lambda s: (s.request.priority, s.request.arrival, s.request.id),
    "shortest_prompt": lambda s: (s.request.prompt_len, s.request.arrival, s.request.id),
}

# Larger key = preempted first.
VICTIM_ORDERS: dict[str, SortKey] = {
    "recent": lambda s: (s.admit_order,),
    "priority": lambda s: (s.request.priority, s.admit_order),
}


def lookup(table: dict[str, SortKey], name: str, what: str) -> SortKey:
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown {what} {name!r}; expected one of {', '.join(sorted(table))}") from None
