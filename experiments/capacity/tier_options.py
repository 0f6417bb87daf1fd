"""`capacity deploy --kv-tier-options off,cpu:64`: KV tiers as a dimension of the search.

Each item is `off` (no tier, even where the config sets one) or `cpu:GIB`, a CPU-memory
tier of GIB GiB per GPU (core/kv_tiers/spec.py); its bandwidth, latency, preemption and
prefix settings are the config's [kv_tier] where it has one, else the tier's defaults.
Only cpu: the launch line is vLLM's native offloading, which keeps KV in CPU memory
(launch.py); a disk tier has no such flag to print."""
from __future__ import annotations

import math

from batchlab.core.kv_tiers import TierConfig
from batchlab.experiments.errors import UserError

OPTION = "--kv-tier-options"


def parse_tier_options(text: str | None) -> list[str]:
    """'off,cpu:64' -> ['off', 'cpu:64'] (None: [''], the config's tier alone); a
    one-line error naming the option and the item where one cannot be."""
    if text is None:
        return [""]
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise UserError(f"{OPTION}: expected a comma-separated list such as off,cpu:64, got {text!r}")
    out = []
    for item in items:
        if item == "off":
            out.append("off")
            continue
        kind, _, size = item.partition(":")
        try:
            gib = float(size)
        except ValueError:
            gib = math.nan
        if kind != "cpu" or not (gib > 0 and math.isfinite(gib)):
            raise UserError(f"{OPTION}: {item!r}: expected off or cpu:GIB (a CPU tier of GIB > 0 GiB "
                            f"per GPU, e.g. cpu:64)")
        out.append(f"cpu:{gib:g}")
    return list(dict.fromkeys(out))


def tier_config(option: str, configured: TierConfig | None) -> TierConfig | None:
    """The tier of one searched item: None for 'off'; else the config's tier (or the
    defaults) at this kind and capacity."""
    if option == "off":
        return None
    kind, _, gib = option.partition(":")
    base = configured.model_dump() if configured is not None else {}
    return TierConfig(**{**base, "kind": kind, "capacity_gib": float(gib)})


def tier_label(option: str) -> str:
    """The deployment label's words for its tier ('' where the config's stands)."""
    if not option:
        return ""
    if option == "off":
        return " no KV tier"
    kind, _, gib = option.partition(":")
    return f" KV {kind} {gib} GiB"


def tier_gib(option: str) -> float | None:
    """The per-GPU capacity of a searched tier (None: off, or the config's)."""
    return float(option.partition(":")[2]) if option and option != "off" else None
