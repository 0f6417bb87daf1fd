"""The gap histogram's counting (core/gap_histogram.py) against the whole-range count it
replaced: the same buckets, the same integer counts, whatever the gaps."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.gap_histogram import BUCKETS, G0, R, GapHistogram


def whole_range(gaps: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """GapHistogram.add as first written: a bincount over every bucket."""
    with np.errstate(divide="ignore"):
        i = np.floor(np.log(np.maximum(gaps, G0) / G0) / math.log1p(R))
    i = np.clip(i, 0, BUCKETS - 1).astype(np.int64)
    return np.bincount(i, weights=counts, minlength=BUCKETS).astype(np.int64)


gap = st.floats(min_value=0.0, max_value=1e6, allow_nan=False) | st.floats(min_value=1e-3, max_value=2e-3)
folds = st.lists(st.lists(st.tuples(gap, st.integers(1, 1000)), max_size=50), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(folds)
def test_folds_count_the_buckets_the_whole_range_does(parts):
    h, want = GapHistogram(), np.zeros(BUCKETS, np.int64)
    for part in parts:
        gaps = np.array([g for g, _ in part], dtype=np.float64)
        counts = np.array([c for _, c in part], dtype=np.int64)
        h.add(gaps, counts)
        want += whole_range(gaps, counts)
    assert np.array_equal(h.counts, want)
