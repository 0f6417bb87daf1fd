"""Searches over a monotone pass/fail test: the highest request rate a policy sustains
under an SLO (bisection on the rate), and the fewest replicas that carry a load
(doubling, then bisection on integers). Studies and `batchlab capacity` share them.

The workload's seed is fixed, so every rate serves the same requests with the same
arrival pattern scaled in time (Gamma gaps scale exactly with 1/rate): the only thing
that changes is load. Bisection assumes that meeting the SLO is monotone in the rate
(true here up to simulation noise at the boundary); it stops when the bracket
[passing rate, failing rate] is narrower than max(abs_tol, rel_tol * rate)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

ABS_TOL = 0.05  # req/s
REL_TOL = 0.01


@dataclass
class SearchResult:
    rate: float  # highest rate found to meet the SLO (0 if none was)
    failing: float  # lowest rate found to miss it
    evaluations: list[tuple[float, bool]] = field(default_factory=list)

    @property
    def tolerance(self) -> float:
        return self.failing - self.rate


def max_rate(passes: Callable[[float], bool], lo: float = 0.0, hi: float | None = None,
             start: float = 1.0, abs_tol: float = ABS_TOL, rel_tol: float = REL_TOL,
             max_evals: int = 40) -> SearchResult:
    """`lo` is known to pass (0 trivially does), `hi` known to fail; without `hi`, the
    rate doubles from `start` until one fails."""
    evals: list[tuple[float, bool]] = []

    def check(rate: float) -> bool:
        ok = passes(rate)
        evals.append((rate, ok))
        return ok

    if hi is None:
        hi = max(start, lo * 2 or start)
        while check(hi):
            lo, hi = hi, hi * 2
            if len(evals) >= max_evals:
                return SearchResult(lo, float("inf"), evals)
    while hi - lo > max(abs_tol, rel_tol * hi) and len(evals) < max_evals:
        mid = (lo + hi) / 2
        if check(mid):
            lo = mid
        else:
            hi = mid
    return SearchResult(lo, hi, evals)


@dataclass
class FewestResult:
    count: int | None  # fewest found to pass (None: not even hi_max)
    evaluations: list[tuple[int, bool]] = field(default_factory=list)


def fewest(passes: Callable[[int], bool], hi_max: int) -> FewestResult:
    """The smallest n in 1..hi_max with passes(n), assuming more never hurts: 1, 2, 4,
    ... until one passes, then bisection between the last failing and the passing one."""
    evals: list[tuple[int, bool]] = []

    def check(n: int) -> bool:
        ok = passes(n)
        evals.append((n, ok))
        return ok

    lo, hi = 0, 1  # lo fails (0 replicas trivially), hi is the candidate
    while not check(hi):
        if hi >= hi_max:
            return FewestResult(None, evals)
        lo, hi = hi, min(2 * hi, hi_max)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if check(mid):
            hi = mid
        else:
            lo = mid
    return FewestResult(hi, evals)
