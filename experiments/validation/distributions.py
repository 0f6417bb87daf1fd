"""The latency distributions of a cell served two times or more (TTFT, TPOT, ITL, E2E):
KS and TOST (+-10%) of the simulation against the pooled real runs, and the same tests
between every two real runs, which say whether a test can tell anything on this
hardware (stat_tests.py). A test decides where it passes between every two real runs,
or where the simulation lies farther from the real runs than any two of them lie from
each other (a larger KS distance; a ratio farther from 1 and outside the TOST margin):
then real noise cannot explain the difference, and the plot shows it."""
from __future__ import annotations

import math
from itertools import combinations

import numpy as np

from batchlab.core.result import RunResult
from batchlab.core.summary import per_request_latencies
from batchlab.experiments.validation.records import DistributionTests
from batchlab.experiments.validation.stat_tests import ks, tost

DISTRIBUTIONS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E latency"))


def samples(run: RunResult, stem: str) -> np.ndarray:
    """One latency value per request (per token for ITL), seconds."""
    if stem == "itl":
        return run.itl
    return per_request_latencies(run.requests)[stem]


def distribution_tests(reals: list[RunResult], sim: RunResult) -> list[DistributionTests]:
    rows = []
    for stem, label in DISTRIBUTIONS:
        per_run = [samples(r, stem) for r in reals]
        pooled, s = np.concatenate(per_run), samples(sim, stem)
        pairs = list(combinations(range(len(reals)), 2))
        rr_ks = [ks(per_run[i], per_run[j]) for i, j in pairs]
        rr_tost = [tost(per_run[i], per_run[j]) for i, j in pairs]
        k, t = ks(s, pooled), tost(s, pooled)
        rows.append(DistributionTests(stem=stem, metric=label, ks=k, tost=t,
                                      real_vs_real_ks=rr_ks, real_vs_real_tost=rr_tost,
                                      ks_decides=all(r.same for r in rr_ks)
                                      or _farther(k.statistic, [r.statistic for r in rr_ks]),
                                      tost_decides=all(r.equivalent for r in rr_tost)
                                      or (t.equivalent is False and _farther(
                                          abs(_log(t.ratio)), [abs(_log(r.ratio)) for r in rr_tost], t.margin))))
    return rows


def _log(x: float) -> float:
    return math.log(x) if x is not None and math.isfinite(x) and x > 0 else math.nan


def _farther(sim: float, real_pairs: list[float], at_least: float = 0.0) -> bool:
    """Whether the simulation's distance exceeds every real pair's (and at_least: for a
    ratio, the log of 1 + the TOST margin)."""
    pairs = [x for x in real_pairs if x is not None and math.isfinite(x)]
    if sim is None or not math.isfinite(sim) or not pairs:
        return False
    return sim > max(pairs) and sim > math.log1p(at_least)


def undecidable(rows, tests: list[DistributionTests]) -> list[str]:
    """The judged numbers the real runs spread too wide for, and the tests that fail
    between the real runs themselves: what this hardware cannot decide."""
    found = [m.label for m in rows if m.target is not None and m.verdict == "undecidable"]
    return found + [f"{d.metric} {t}" for d in tests for t, ok in (("KS", d.ks_decides), ("TOST", d.tost_decides))
                    if not ok]
