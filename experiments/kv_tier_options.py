"""The KV tier's options (simulate, validate): the [kv_tier] table from the command line
(core/kv_tiers/spec.py says what each means and where its defaults come from)."""
from __future__ import annotations

import argparse


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
