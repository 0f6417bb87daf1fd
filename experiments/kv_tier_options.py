"""The KV tier's options (simulate, validate): the [kv_tier] table from the command line
(core/kv_tiers/spec.py says what each means and where its defaults come from)."""
from __future__ import annotations

import argparse

from batchlab.core.cost.form import CostModel
from batchlab.core.kv_tiers import TierConfig, lone_prefill_seconds
from batchlab.experiments.errors import UserError


def add_kv_tier_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("KV tier ([kv_tier]: memory below the GPU's KV pool)")
    g.add_argument("--kv-tier", dest="kt_kind", choices=("cpu", "disk"),
                   help="a tier of this kind (needs --kv-tier-capacity)")
    g.add_argument("--kv-tier-capacity", dest="kt_capacity_gib", type=float, metavar="GIB",
                   help="its size per GPU in GiB (alone: a cpu tier)")
    g.add_argument("--kv-tier-bandwidth", dest="kt_bandwidth_gbs", type=float, metavar="GBS",
                   help="GB/s each way per GPU (default 25: PCIe Gen4 x16; 7 for disk)")
    g.add_argument("--kv-tier-latency-us", dest="kt_latency_us", type=float, metavar="US",
                   help="per transfer (default 10 cpu, 100 disk)")
    g.add_argument("--kv-tier-preemption", dest="kt_preemption", choices=("swap", "recompute", "cheapest"),
                   help="a preempted sequence's KV: swap to the tier, recompute, or whichever "
                        "costs less (default)")
    g.add_argument("--no-kv-tier-prefix", dest="kt_prefix", action="store_const", const=False,
                   help="do not keep prefix-cache blocks the GPU evicts in the tier")


def check_backend_tier(tier: TierConfig | None, priced: bool) -> None:
    """What the backend's tier (backend/kv_tiers/) cannot do, refused before the model
    loads: keep prefix units, or choose 'cheapest' with nothing to price a recompute."""
    if tier is None:
        return
    if tier.prefix:
        raise UserError("kv_tier.prefix: the backend's tier swaps preempted sequences only; set "
                        "prefix = false (--no-kv-tier-prefix)")
    if tier.preemption == "cheapest" and not priced:
        raise UserError("kv_tier.preemption = 'cheapest' needs --profile to price a recompute on the "
                        "backend; give swap or recompute (--kv-tier-preemption)")


def tier_price(tier: TierConfig | None, cost: CostModel | None):
    """A recompute's price for 'cheapest' on the backend (None: not needed, or none)."""
    return lone_prefill_seconds(cost) if tier is not None and cost is not None else None
