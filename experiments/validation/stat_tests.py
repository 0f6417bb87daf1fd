"""The statistics of a repeated validation: how far repeated real runs spread, and two
tests of a latency distribution (scipy): a two-sample Kolmogorov-Smirnov test (are the
two distributions the same?) and a TOST equivalence test (is the typical latency within
+-margin of the other's?).

TOST is on log latencies (latencies are skewed and errors are relative): two one-sided
Welch t-tests that the ratio of geometric means lies above 1 - margin and below
1 + margin; equivalent when both reject at alpha. Both tests treat the requests of a run
as independent samples, which queueing makes them not quite: a p-value here is a guide,
which is why every test is also run between the real runs themselves."""
from __future__ import annotations

import math
from itertools import combinations

import numpy as np

from batchlab.experiments.validation.records import KsTest, Spread, TostTest

ALPHA = 0.05
MARGIN = 0.10  # TOST equivalence bounds: +-10%


def _clean(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, float)
    return x[np.isfinite(x) & (x > 0)]


def ks(a: np.ndarray, b: np.ndarray) -> KsTest:
    """Two-sample KS: statistic (the largest gap between the two CDFs), p-value, and
    `same` (not rejected at ALPHA). NaN where a sample is empty."""
    from scipy import stats  # lazy: scipy.stats, which cannot import where torch is blocked

    a, b = _clean(a), _clean(b)
    if not a.size or not b.size:
        return KsTest(statistic=math.nan, p=math.nan, same=None, n=[int(a.size), int(b.size)])
    r = stats.ks_2samp(a, b)
    return KsTest(statistic=float(r.statistic), p=float(r.pvalue), same=bool(r.pvalue >= ALPHA),
                  n=[int(a.size), int(b.size)])


def tost(a: np.ndarray, b: np.ndarray, margin: float = MARGIN) -> TostTest:
    """Equivalence of a to b within +-margin, on log values (module docstring): ratio of
    geometric means a/b, the TOST p-value (the larger one-sided one) and `equivalent`."""
    from scipy import stats  # lazy: scipy.stats, which cannot import where torch is blocked

    la, lb = np.log(_clean(a)), np.log(_clean(b))
    if la.size < 2 or lb.size < 2:
        return TostTest(ratio=math.nan, p=math.nan, equivalent=None, margin=margin)
    lo, hi = math.log(1 - margin), math.log(1 + margin)
    ratio = math.exp(float(la.mean() - lb.mean()))
    if np.ptp(la) == 0 and np.ptp(lb) == 0:  # no spread: the ratio itself decides
        inside = math.exp(lo) < ratio < math.exp(hi)
        return TostTest(ratio=ratio, p=0.0 if inside else 1.0, equivalent=inside, margin=margin)
    p_lo = stats.ttest_ind(la - lo, lb, equal_var=False, alternative="greater").pvalue
    p_hi = stats.ttest_ind(la - hi, lb, equal_var=False, alternative="less").pvalue
    p = float(max(p_lo, p_hi))
    return TostTest(ratio=ratio, p=p, equivalent=bool(p < ALPHA), margin=margin)


def spread(values: list[float]) -> Spread:
    """How far repeated measurements of one number spread: min, max, median, the range
    over the median, and the median |relative difference| over pairs of runs."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], float)
    if not v.size:
        return Spread(min=math.nan, max=math.nan, median=math.nan, range=math.nan,
                      pairwise_median=math.nan, n=0)
    med = float(np.median(v))
    pairs = [abs(x - y) / abs(y) for x, y in combinations(v, 2) if y != 0]
    return Spread(min=float(v.min()), max=float(v.max()), median=med,
                  range=float(v.max() - v.min()) / abs(med) if med else math.nan,
                  pairwise_median=float(np.median(pairs)) if pairs else 0.0, n=int(v.size))


def inside(value: float, s: Spread) -> bool | None:
    """Whether value lies in the repeated runs' [min, max] (None if undefined)."""
    if value is None or not math.isfinite(value) or not s.n:
        return None
    return bool(s.min <= value <= s.max)
