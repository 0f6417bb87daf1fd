"""Admission orders (who leaves the waiting queue first) and preemption victim orders.

Each is a sort key over a sequence, registered with @admission_order or @victim_order.
Every module in this package is imported here, so a new order is one function in one
file (here, or in a policy's own module) that every scheduler, both worlds (sim and
backend) and the command line (--admission, --preemption, --list-policies) pick up.
From outside the project: an entry point in batchlab.admission_orders or
batchlab.victim_orders naming the function, or module:function given as the name
(core/plugins.py); lookup resolves either."""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable

from batchlab.core.plugins import ADMISSION_GROUP, VICTIM_GROUP, PluginError, Plugins, kind_of
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
    """The order `name` stands for in `table` (ADMISSION_ORDERS or VICTIM_ORDERS): built
    in, an installed entry point of that name, or module:function (PluginError, one
    line, otherwise)."""
    return _PLUGINS[id(table)].get(name, what)


def all_orders(table: dict[str, Order], what: str) -> dict[str, Order]:
    """Every registered order of `table`, installed plug-ins included (the listings,
    the property tests)."""
    return _PLUGINS[id(table)].everything(what)


def checked_order(obj: object, name: str, what: str) -> Order:
    """obj as an order: a sort key function (its docstring's first paragraph describes it)."""
    if isinstance(obj, type) or not callable(obj):
        raise PluginError(what, name, f"{kind_of(obj)} is not a function; expected a sort key "
                                      f"function (sequence -> tuple)")
    return Order(name, obj, first_paragraph(obj.__doc__))


def _same_key(a: Order, b: Order) -> bool:
    return a.key is b.key


_PLUGINS = {id(table): Plugins(table, group, "module:function", checked_order, _same_key)
            for table, group in ((ADMISSION_ORDERS, ADMISSION_GROUP), (VICTIM_ORDERS, VICTIM_GROUP))}


for _mod in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_mod.name}")
