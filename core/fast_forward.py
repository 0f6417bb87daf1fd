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


def block_crossings(cached: np.ndarray, table_len: np.ndarray, block_size: int,
                    m: int) -> tuple[np.ndarray, np.ndarray]:
    """New blocks needed by steps 2..m, as (step, sequence index) pairs in the order a
    step-by-step scheduler allocates them: by step, then by position in the batch."""
    first = table_len * block_size  # first position not covered by the table
    last = cached + m - 1  # position processed at step m
    count = np.where(last >= first, (last - first) // block_size + 1, 0)
    seq = np.repeat(np.arange(len(cached)), count)
    nth = np.arange(len(seq)) - np.repeat(np.cumsum(count) - count, count)
    step = first[seq] + nth * block_size - cached[seq] + 1
    order = np.lexsort((seq, step))
    return step[order], seq[order]
