"""Inter-token gaps in fixed memory: a log-spaced histogram, for runs that keep no step
table (millions of requests). Bucket i holds gaps in [G0 (1+R)^i, G0 (1+R)^(i+1)); it
reports each bucket by its geometric middle, so every gap it returns is within R/2
(0.005%) of the true one, and percentiles with it."""
from __future__ import annotations

import math

import numpy as np

R = 1e-4  # relative bucket width
G0 = 1e-7  # seconds; smaller gaps (and zero) go to the first bucket
G_MAX = 1e5  # seconds; larger ones go to the last
BUCKETS = int(math.log(G_MAX / G0) / math.log1p(R)) + 1  # ~276k: 2.2 MB of counts


class GapHistogram:
    def __init__(self) -> None:
        self.counts = np.zeros(BUCKETS, np.int64)

    def add(self, gaps: np.ndarray, counts: np.ndarray) -> None:
        if not len(gaps):
            return
        x = np.maximum(gaps, G0)
        x /= G0  # the same ufuncs in place: the same bits, no temporaries
        np.log(x, out=x)
        x /= math.log1p(R)
        # x >= 0 (the log of at least 1): truncating floors it, and only the top clips.
        np.minimum(x, BUCKETS - 1, out=x)
        i = x.astype(np.int64)
        # Counted over the buckets between the smallest and the largest gap only (a fold's
        # gaps span a few thousand of the 276k): integer counts, summed exactly either way.
        lo, hi = int(i.min()), int(i.max()) + 1
        self.counts[lo:hi] += np.bincount(i - lo, weights=counts, minlength=hi - lo).astype(np.int64)

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(gap, count) for every non-empty bucket, gaps at the bucket middles."""
        i = np.flatnonzero(self.counts)
        return G0 * np.exp((i + 0.5) * math.log1p(R)), self.counts[i].copy()
