"""What a run can hold: sizes that cannot fit in this machine's memory are refused
before anything is allocated, with the figure they would need. The per-item figures are
measured orders of magnitude (Python lists and numpy columns), rounded up."""
from __future__ import annotations

import os

# A request: its workload columns (3 x 8 bytes), its request-table row (12 columns) and
# the transient Request/Sequence while it is served.
BYTES_PER_REQUEST = 256
# A replica: its SimPy process, scheduler and recorder state, with nothing running
# (measured: 20,000 replicas of llama-3-8b on an A100 add 77 MB, ~4 kB each).
BYTES_PER_REPLICA = 16 * 1024
# A KV block's bookkeeping in core/kv.py's BlockManager, per block of the pool: none.
# Never-used blocks are a counter; blocks in use cost their slots in the sequences'
# tables (bounded by the requests in flight), so a pool of any size costs O(1).
KV_BYTES_PER_BLOCK = 0
# No single machine holds more memory than this (the largest shared-memory servers hold
# 32 TiB): a stored run whose KV pool would need more never ran (validate --real).
MAX_MACHINE_BYTES = 2**46
# A trace line while its chunk is parsed, beyond its text (lists of fields, columns).
BYTES_PER_TRACE_ROW = 200


def available_bytes() -> int:
    """Memory that can still be allocated on this host (MemAvailable; else free pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        return 2**62  # unknown: do not refuse


def gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n < 2**50 else f"{n / 2**30:.3g} GiB"


def require_memory(need: float, what: str) -> None:
    """ValueError naming `what` when `need` bytes exceed what this host has available."""
    have = available_bytes()
    if need > have:
        raise ValueError(f"{what} would need about {gib(need)} of memory; this machine has "
                         f"{gib(have)} available")


def check_run_size(num_requests: int, replicas: int, kv_blocks: int) -> None:
    """A simulation's bookkeeping: request rows, replicas and their KV block lists."""
    need = (num_requests * BYTES_PER_REQUEST
            + replicas * (BYTES_PER_REPLICA + kv_blocks * KV_BYTES_PER_BLOCK))
    require_memory(need, f"{num_requests:,} requests on {replicas:,} replica(s) of "
                         f"{kv_blocks:,} KV blocks")
