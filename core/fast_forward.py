"""Closed forms for runs of identical decode steps, so the simulator can advance over
many steps at once and stay exactly equal to stepping one by one.

During such a run every sequence of the batch decodes one token per step: sequence i
processes position c_i + j - 1 at step j (c_i = tokens cached before step 1) and needs
ceil((c_i + j) / block_size) KV blocks by then."""
from __future__ import annotations

import numpy as np


def kv_steps(cached: np.ndarray, table_len: np.ndarray, block_size: int, free: int, k: int) -> int:
    """Largest j <= k such that running steps 1..j needs at most `free` new blocks.
    (Step 1's blocks are already held, so the answer is at least 1.)"""
    def extra(j: int) -> int:
        return int(np.maximum(0, -(-(cached + j) // block_size) - table_len).sum())

    if extra(k) <= free:
        return k
    lo, hi = 1, k  # extra is non-decreasing in j
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if extra(mid) <= free else (lo, mid)
    return lo
