"""Groups' runs (part.py) put together as the one run of all their replicas: the same
tables, gaps, totals and meta, bit for bit (tests/test_replica_groups.py)."""
from __future__ import annotations

import functools
import operator

import numpy as np

from batchlab.core.gap_histogram import GapHistogram
from batchlab.core.result import RunResult
from batchlab.core.run_meta import RunMeta
from batchlab.core.workload import Workload
from batchlab.sim.replica_groups.part import GroupRun
from batchlab.sim.replica_groups.rows import unpack


def merge(parts: list[GroupRun], workload: Workload, spare: dict[str, np.ndarray] | None = None) -> RunResult:
    """parts: every group of the run, in any order; workload: the whole run's (its
    columns fill the request rows: rows.py). Consumes the parts' tables. spare: columns
    made ahead for the request rows (rows.spare_columns)."""
    parts = sorted(parts, key=lambda p: p.group.start)
    info = {**parts[0].info, "simulated_s": simulated_s(parts),
            "interrupted": any(p.info["interrupted"] for p in parts)}
    requests = unpack([p.requests for p in parts], workload, info["replicas"], [p.group for p in parts], spare)
    steps = None
    if parts[0].steps is not None:  # consecutive groups: replica order, time order within
        steps = {c: np.concatenate([p.steps[c] for p in parts]) for c in parts[0].steps}
    if parts[0].gap_counts is None:
        gaps = np.concatenate([p.itl_gaps for p in parts])
        counts = np.concatenate([p.itl_counts for p in parts])
    else:
        hist = GapHistogram()
        for p in parts:
            hist.counts += p.gap_counts
        gaps, counts = hist.pairs()
    totals = functools.reduce(operator.add, (p.sums for p in parts)).totals
    return RunResult(requests, steps, gaps, counts, RunMeta(**info), totals)


def simulated_s(parts: list[GroupRun]) -> float:
    """The run's simulated time: its end, the latest group's; where Ctrl-C stopped some
    groups, the span every replica was simulated to, the shortest of theirs (a group that
    ran to its end holds every row of its replicas, so bounds nothing)."""
    stopped = [p.info["simulated_s"] for p in parts if p.info["interrupted"]]
    return min(stopped) if stopped else max(p.info["simulated_s"] for p in parts)
