"""Bootstrap replicates of a trace, so that seeds on a trace sample the workload's own
variability rather than re-running one fixed request list:

  requests   each arrival keeps its time and takes the lengths (and prefix hashes,
             priority) of a request drawn with replacement from the trace: the length
             mix varies, the arrival process does not
  windows    a moving-block bootstrap: the trace's span cut into blocks of block_s
             seconds, as many drawn with replacement and laid end to end: bursts, quiet
             spells and the lengths that came with them vary together, each block
             keeping its own arrival pattern (the request count varies too)

Each replicate is drawn from the run's seed; the same seed gives the same replicate."""
from __future__ import annotations

import math

import numpy as np

from batchlab.core.workload.workload import Workload

RESAMPLE = ("requests", "windows")


def resample_requests(w: Workload, rng: np.random.Generator) -> Workload:
    drawn = rng.integers(0, len(w), size=len(w))
    return w.take(drawn, f"resampled: each arrival's request drawn with replacement from the {len(w)}",
                  arrival=w.arrival.copy())


def resample_windows(w: Workload, block_s: float, rng: np.random.Generator) -> Workload:
    start = float(w.arrival[0])
    blocks = max(1, math.ceil((float(w.arrival[-1]) - start) / block_s + 1e-12))
    edges = np.searchsorted(w.arrival, start + np.arange(blocks + 1) * block_s, side="left")
    edges[-1] = len(w)  # the last block keeps the trace's last arrival
    drawn = rng.integers(0, blocks, size=blocks)
    index = [np.arange(edges[b], edges[b + 1]) for b in drawn]  # blocks >= 1: never empty
    arrival = [w.arrival[i] + (k - b) * block_s for k, (b, i) in enumerate(zip(drawn, index))]  # block b to place k
    order = np.concatenate(index)
    return w.take(order, f"resampled: {blocks} blocks of {block_s:g} s drawn with replacement "
                  f"(moving-block bootstrap): {len(order)} requests", arrival=np.concatenate(arrival))


def resample(w: Workload, how: str, block_s: float, rng: np.random.Generator) -> Workload:
    if how not in RESAMPLE:
        raise ValueError(f"resample must be one of {', '.join(RESAMPLE)}, got {how!r}")
    if not len(w):
        return w
    return resample_requests(w, rng) if how == "requests" else resample_windows(w, block_s, rng)
