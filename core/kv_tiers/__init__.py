"""KV tiers: memory below the GPU's KV pool (CPU memory, local disk) where preempted
sequences swap their KV and evicted prefix-cache blocks stay, at the cost of moving bytes
over the host link (docs/kv-tiers.md).

    spec.py     the tier as configured ([kv_tier]): kind, capacity, bandwidth, latency,
                preemption policy; defaults with their sources; checks
    home.py     TieredHome, the KVHome (core/kv_home.py) that keeps KV in the tier and
                prices moving it; the per-preemption swap-or-recompute choice; HandOffTier,
                a decode replica's, whose hand-offs come over the link, not from the tier
    columns.py  the tier's step-table columns and summary figures (only when a tier is on)
"""
from batchlab.core.kv_tiers.home import HandOffTier, TieredHome, lone_prefill_seconds
from batchlab.core.kv_tiers.spec import TierConfig

__all__ = ["HandOffTier", "TierConfig", "TieredHome", "lone_prefill_seconds"]
