"""The real backend's KV tier: swap preemption copies a sequence's KV blocks from the
paged pool to host memory and back (host.py), under the scheduler's own decisions."""
from batchlab.backend.kv_tiers.host import HostSwap

__all__ = ["HostSwap"]
