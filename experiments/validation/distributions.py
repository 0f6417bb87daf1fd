"""The latency distributions of a cell served two times or more (TTFT, TPOT, ITL, E2E):
KS and TOST (+-10%) of the simulation against the pooled real runs, and the same tests
between every two real runs, which say whether a test can tell anything on this
hardware (stat_tests.py)."""
from __future__ import annotations

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
        rows.append(DistributionTests(stem=stem, metric=label, ks=ks(s, pooled), tost=tost(s, pooled),
                                      real_vs_real_ks=rr_ks, real_vs_real_tost=rr_tost,
                                      ks_decides=all(t.same for t in rr_ks),
                                      tost_decides=all(t.equivalent for t in rr_tost)))
    return rows


def undecidable(rows, tests: list[DistributionTests]) -> list[str]:
    """The judged numbers the real runs spread too wide for, and the tests that fail
    between the real runs themselves: what this hardware cannot decide."""
    found = [m.label for m in rows if m.target is not None and m.verdict == "undecidable"]
    return found + [f"{d.metric} {t}" for d in tests for t, ok in (("KS", d.ks_decides), ("TOST", d.tost_decides))
                    if not ok]
