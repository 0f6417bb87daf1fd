"""Closed forms for runs of decode steps, so the simulator can advance over many steps
at once and stay exactly equal to stepping one by one.

During such a run every sequence of the batch decodes one token per step until it
finishes: sequence i (c_i tokens cached before step 1, r_i tokens left to generate)
takes part in steps 1..r_i, processes position c_i + j - 1 at step j and needs
ceil((c_i + j) / block_size) KV blocks by then. A step's shape is then the count n_j of
sequences still running and the KV they read, sum over them of c_i + j."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from core.batch import StepFeatures
from core.cost import CostModel, decode_run_times

# Stretches of equal batch size shorter than these are priced step by step (in the cost
# model's pure-Python form, or by step_time), longer ones by one numpy call.
SHORT_PLAIN, SHORT_STEPS = 48, 6


def kv_steps(cached: np.ndarray, table_len: np.ndarray, block_size: int, free: int, k: int,
             remaining: np.ndarray | None = None) -> int:
    """Largest j <= k such that running steps 1..j needs at most `free` new blocks,
    counting none of the blocks that finishing sequences give back (so the answer is
    safe). (Step 1's blocks are already held, so it is at least 1.)"""
    def extra(j: int) -> int:
        upto = j if remaining is None else np.minimum(j, remaining)
        return int(np.maximum(0, -(-(cached + upto) // block_size) - table_len).sum())

    if extra(k) <= free:
        return k
    lo, hi = 1, k  # extra is non-decreasing in j
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if extra(mid) <= free else (lo, mid)
    return lo


def block_steps(first: list[int], count: list[int], block_size: int, m: int) -> list[int]:
    """Blocks taken at each of steps 1..m when sequence i takes count[i] of them, one
    every block_size steps from step first[i]."""
    if sum(count) <= 64:  # few: a plain loop is cheaper than numpy's overhead
        taken = [0] * (m + 1)
        for f, n in zip(first, count):
            for j in range(f, f + n * block_size, block_size):
                taken[j] += 1
        return taken[1:]
    c = np.array(count)
    nth = np.arange(c.sum()) - np.repeat(np.cumsum(c) - c, c)
    steps = np.repeat(np.array(first), c) + nth * block_size
    return np.bincount(steps, minlength=m + 1)[1:].tolist()


@dataclass
class DecodeRun:
    """Steps 1..len(durations) of a run: each one's duration, batch size and KV read."""
    durations: list[float]
    num_seqs: list[int]
    kv_read: list[int]


def decode_run(cost: CostModel, cached: list[int], remaining: list[int], k: int) -> DecodeRun:
    """Price steps 1..k (k <= max(remaining)). Between two finishes the batch size is
    constant and the KV read grows by n a step: a stretch of equal size is one
    vectorised cost call (or step_time calls when short, where those are cheaper)."""
    leaving: dict[int, list[int]] = defaultdict(lambda: [0, 0])  # step -> [count, sum c]
    if min(remaining) < k:  # often nobody leaves within the steps asked for
        for c, r in zip(cached, remaining):
            if r < k:
                e = leaving[r]
                e[0] += 1
                e[1] += c
    n, base = len(cached), sum(cached)  # sequences running and their sum of c_i
    plain = getattr(cost, "decode_times", None)  # a cost model's own pure-Python form
    run = DecodeRun([], [], [])
    start = 1
    # Stretch by stretch, steps start..stop: the leaving steps are distinct, >= 1 and
    # below k, so no stretch is empty.
    for stop in sorted(leaving) + [k]:
        length = stop - start + 1
        kv0 = base + start * n
        if plain is not None and length < SHORT_PLAIN:
            run.durations += plain(n, kv0, length)
        elif length < SHORT_STEPS:
            run.durations += [cost.step_time(StepFeatures(n, 0, 0, n, kv, kv))
                              for kv in range(kv0, kv0 + length * n, n)]
        else:
            run.durations += decode_run_times(cost, StepFeatures(n, 0, 0, n, kv0, kv0),
                                              length).tolist()
        run.num_seqs += [n] * length
        run.kv_read += range(kv0, kv0 + length * n, n)
        start = stop + 1
        if stop in leaving:  # sequences whose last step is `stop` leave after it
            count, c_sum = leaving[stop]
            n, base = n - count, base - c_sum
    return run
