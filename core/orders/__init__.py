"""Admission orders (who leaves the waiting queue first) and preemption victim orders.

Each is a sort key over a sequence, registered with @admission_order or @victim_order.
Every module in this package is imported here, so a new order is one function in one
file (here, or in a policy's own module) that every scheduler, both worlds (sim and
backend) and the command line (--admission, --preemption, --list-policies) pick up."""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable

from batchlab.core.request import Sequence

SortKey = Callable[[Sequence], tuple]


@dataclass(frozen=True)
class Order:
    name: str
    key: SortKey
    description: str
    # Victim orders only: the key sorts running sequences as they were admitted (the
    # scheduler then skips the sort: its running list is already in that order).
    admission_ordered: bool = False


# Admission: smaller key = admitted first. Victims: larger key = preempted first. Keys are
# computed once, when a sequence joins the waiting queue (or runs), so they may read the
# request and the sequence's counters but not the clock. End ties on arrival and id.
ADMISSION_ORDERS: dict[str, Order] = {}
VICTIM_ORDERS: dict[str, Order] = {}


def _registrar(table: dict[str, Order], name: str, description: str | None, **kw):
    def deco(fn: SortKey) -> SortKey:
        table[name] = Order(name, fn, description or first_paragraph(fn.__doc__), **kw)
        return fn
    return deco


def admission_order(name: str, description: str | None = None) -> Callable[[SortKey], SortKey]:
    """Register a sort key as admission order `name` (description: default the
    function's first docstring line)."""
    return _registrar(ADMISSION_ORDERS, name, description)


def victim_order(name: str, description: str | None = None,
                 admission_ordered: bool = False) -> Callable[[SortKey], SortKey]:
    """Register a sort key as preemption victim order `name` (largest key goes first)."""
    return _registrar(VICTIM_ORDERS, name, description, admission_ordered=admission_ordered)


def first_paragraph(doc: str | None) -> str:
    """A docstring's first paragraph on one line (the listings' description)."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def lookup(table: dict[str, Order], name: str, what: str) -> Order:
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown {what} {name!r}; expected one of {', '.join(sorted(table))}") from None


for _mod in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_mod.name}")
