"""Hypothesis draws over everything registered: every policy (with its declared
parameters drawn from their ranges), every admission order, every victim order, both
KV allocation modes; lengths from a few tokens to thousands, KV pools from tight to
ample, so that a policy's thresholds are crossed.

Everything registered includes installed plug-ins (entry points). Focus on one policy:
BATCHLAB_TEST_POLICY=NAME (or `pytest --policy NAME`); NAME may be module:Class, a policy
from outside the project that no registry lists."""
from __future__ import annotations

import os
import typing

from hypothesis import strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.kv import blocks_for
from batchlab.core.kv_reservation import KV_ALLOCATIONS
from batchlab.core.orders import ADMISSION_ORDERS, VICTIM_ORDERS, all_orders
from batchlab.core.params import PolicyParams, describe
from batchlab.core.plugins import PluginError
from batchlab.core.request import Request
from batchlab.core.schedulers import Scheduler, all_policies, policy_class

# Integer parameters are drawn up to this (a threshold far above every drawn length is
# never crossed); floats over their whole declared range.
INT_CAP = 4096


def registered() -> dict[str, type[Scheduler]]:
    """Every registered policy (installed plug-ins included), and a module:Class focus."""
    out = dict(all_policies())
    focus = os.environ.get("BATCHLAB_TEST_POLICY")
    if focus:
        try:
            out[focus] = policy_class(focus)
        except PluginError as e:
            raise ValueError(f"BATCHLAB_TEST_POLICY={focus}: {e.problem}") from None
    return out


def policies(among: typing.Iterable[str] | None = None) -> list[str]:
    """Registered policy names (or those of `among`), narrowed to the focus if one is set."""
    names = sorted(registered() if among is None else among)
    focus = os.environ.get("BATCHLAB_TEST_POLICY")
    if focus:
        names = [n for n in names if n == focus]
    return names


def admission_orders() -> list[str]:
    return sorted(all_orders(ADMISSION_ORDERS, "admission order"))


def victim_orders() -> list[str]:
    return sorted(all_orders(VICTIM_ORDERS, "preemption victim order"))


def _value(field: dict, annotation) -> st.SearchStrategy:
    b = field["bounds"]
    if annotation is bool:
        return st.booleans()
    if typing.get_origin(annotation) is typing.Literal:
        return st.sampled_from(typing.get_args(annotation))
    if annotation is int:
        lo = b.get("ge", b["gt"] + 1 if "gt" in b else 0)
        hi = b.get("le", b["lt"] - 1 if "lt" in b else INT_CAP)
        return st.integers(lo, max(lo, min(hi, INT_CAP)))
    if annotation is float:
        lo, hi = b.get("ge", b.get("gt", 0.0)), b.get("le", b.get("lt", 1e6))
        return st.floats(lo, hi, exclude_min="gt" in b, exclude_max="lt" in b, allow_nan=False)
    raise TypeError(f"cannot draw a parameter of type {annotation!r}: add it to tests/draws.py")


@st.composite
def params(draw, model: type[PolicyParams]) -> dict:
    """Each declared parameter left at its default or drawn from its range."""
    out = {}
    for f in describe(model):
        if draw(st.booleans()):
            out[f["name"]] = draw(_value(f, model.model_fields[f["name"]].annotation))
    return out


@st.composite
def requests(draw, max_n: int = 25, arrivals=(0.0, 0.0, 0.5, 1.0, 3.0, 20.0)) -> list[Request]:
    """Either many short requests or a few of realistic length (prompts to 4096
    tokens, outputs to 2048): the long ones keep the number of steps affordable."""
    long = draw(st.booleans())
    n = draw(st.integers(1, 8 if long else max_n))
    prompt = st.integers(1, 4096) if long else st.integers(1, 80)
    output = st.one_of(st.integers(1, 64), st.integers(64, 2048)) if long else st.integers(1, 40)
    reqs, t = [], 0.0
    for i in range(n):
        t += draw(st.sampled_from(arrivals))
        reqs.append(Request(id=i, arrival=t, prompt_len=draw(prompt), output_len=draw(output),
                            priority=draw(st.integers(0, 3))))
    return reqs


@st.composite
def configs(draw, reqs: list[Request], policy: str | None = None,
            budgets=(None, 16, 64, 200, 2048), delays=(0.0, 0.0, 2.5)) -> tuple[SchedulerConfig, int]:
    """A scheduler config for `reqs` and a KV pool, in blocks, from tight (below the
    largest request: it is rejected) to ample (every request at once)."""
    name = policy or draw(st.sampled_from(policies()))
    block_size = draw(st.sampled_from([1, 4, 16] if max(r.prompt_len for r in reqs) <= 80 else [16, 32]))
    need = [blocks_for(r.max_kv_tokens, block_size) for r in reqs]
    blocks = max(2, int(draw(st.sampled_from([0.6, 1.0, 1.0, 1.5, 3.0])) * max(need)),
                 draw(st.sampled_from([0, 0, 0, sum(need)])))
    cfg = SchedulerConfig(
        policy=name,
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=draw(st.sampled_from(budgets)),
        block_size=block_size,
        admission=draw(st.sampled_from(admission_orders())),
        preemption=draw(st.sampled_from(victim_orders())),
        max_batch_delay_s=draw(st.sampled_from(delays)),
        kv_allocation=draw(st.sampled_from(KV_ALLOCATIONS)),
        params=draw(params(policy_class(name).Params)),
    )
    return cfg, blocks
