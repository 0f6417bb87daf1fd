"""`batchlab simulate --list-policies`: every registered policy (with its parameters,
their defaults and descriptions), admission order and victim order, installed plug-ins
(entry points) included."""
from __future__ import annotations

from typing import Any

from batchlab.core.kv_reservation import KV_ALLOCATIONS
from batchlab.core.orders import ADMISSION_ORDERS, VICTIM_ORDERS, all_orders, first_paragraph
from batchlab.core.params import describe
from batchlab.core.schedulers import all_policies


def registry() -> dict[str, Any]:
    policies = {}
    registered = all_policies()
    admission = all_orders(ADMISSION_ORDERS, "admission order")
    victims = all_orders(VICTIM_ORDERS, "preemption victim order")
    for name in sorted(registered):
        cls = registered[name]
        policies[name] = {"description": cls.description or first_paragraph(cls.__doc__)
                          or first_paragraph(__import__(cls.__module__, fromlist=["_"]).__doc__),
                          "fast_forward": cls.fast_forward, "params": describe(cls.Params)}
    return {"policies": policies,
            "admission_orders": {n: admission[n].description for n in sorted(admission)},
            "victim_orders": {n: victims[n].description for n in sorted(victims)},
            "kv_allocation": list(KV_ALLOCATIONS)}


def _bounds(b: dict[str, Any]) -> str:
    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    return ", ".join(f"{signs[k]} {v:g}" for k, v in b.items())


def render() -> str:
    r = registry()
    width = max(len(n) for table in ("policies", "admission_orders", "victim_orders") for n in r[table])
    out = ["policies (--policy; parameters: --policy-param NAME=VALUE or [scheduler.params]):"]
    for name, p in r["policies"].items():
        out.append(f"  {name.ljust(width)}  {p['description']}")
        for f in p["params"]:
            limits = f"; {_bounds(f['bounds'])}" if f["bounds"] else ""
            out.append(f"  {''.ljust(width)}    {f['name']} = {f['default']!r} ({f['type']}{limits}): "
                       f"{f['description']}")
    for table, title in (("admission_orders", "admission orders (--admission)"),
                         ("victim_orders", "victim orders (--preemption)")):
        out.append(f"{title}:")
        out += [f"  {n.ljust(width)}  {d}" for n, d in r[table].items()]
    out.append(f"KV allocation (--kv-allocation): {' | '.join(r['kv_allocation'])}")
    return "\n".join(out)
