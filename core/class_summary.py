"""Latency and goodput broken down by a request column (priority class, replica), with
the names of core/summary.py. Rates are over the whole run's duration, so the classes'
throughputs and goodputs add up to the run's."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchlab.core.summary import SLO, _stats, meets_slo, per_request_latencies, run_duration

# Which breakdowns a summary carries, and the request column each one reads.
BREAKDOWNS = {"by_priority": "priority", "by_replica": "replica"}


@dataclass
class ClassFigures:
    """A class's figures that need only its own rows (not the run's duration): they can
    be computed where the rows are (a replica group's process: sim/replica_groups), and
    class_summary_of() turns them into the class's summary once the duration is known."""
    requests: int
    completed: int
    rejected: int
    output_tokens: int
    stats: dict[str, float]  # latencies (core/summary.py's _stats), in summary order
    good: int | None  # requests that met the SLO (None: no SLO)


def class_figures(req: dict[str, np.ndarray], slo: SLO | None) -> ClassFigures:
    return _row_figures(req, slo).of(slice(None))


@dataclass
class _RowFigures:
    """A table's per-request figures, each computed once over the whole table in one
    contiguous pass; a class takes its rows of them (a strided view under round-robin)
    rather than computing them again on its rows. Values of unfinished rows are never
    read."""
    done: np.ndarray
    rejected: np.ndarray | None  # None: every request finished
    output_len: np.ndarray
    multi: np.ndarray  # output_len > 1: the rows a TPOT is defined for
    latencies: dict[str, np.ndarray]  # ttft, tpot, e2el, queue (seconds)
    good: np.ndarray | None  # met the SLO (None: no SLO)

    def of(self, rows: slice | np.ndarray) -> ClassFigures:
        done = self.done[rows]
        every = bool(done.all())

        def pick(col: np.ndarray) -> np.ndarray:
            return col[rows] if every else col[rows][done]

        multi = pick(self.multi)
        stats: dict[str, float] = {}
        for name, key in (("ttft", "ttft"), ("tpot", "tpot"), ("e2el", "e2el"), ("queueing_delay", "queue")):
            values = pick(self.latencies[key])
            stats.update(_stats(name, values[multi] if key == "tpot" and not multi.all() else values))
        rejected = 0 if self.rejected is None else int(self.rejected[rows].sum())
        return ClassFigures(int(len(done)), int(done.sum()), rejected, int(pick(self.output_len).sum()), stats,
                            None if self.good is None else int(pick(self.good).sum()))


def _row_figures(req: dict[str, np.ndarray], slo: SLO | None) -> _RowFigures:
    """core/summary.py's own per-request figures, taken over every row (a class picks its
    finished ones): the TPOT placed at its row (NaN for one-token replies, never read)."""
    status, out_len = req["status"], req["output_len"]
    done = status == "finished"
    every_row = np.ones(len(done), dtype=bool)
    lat = per_request_latencies(req, every_row)
    good = None if slo is None else meets_slo(req, slo, lat, every_row)
    multi = out_len > 1
    if len(lat["tpot"]) < len(multi):  # after meets_slo, which places them its own way
        tpot = np.full(len(multi), np.nan)
        tpot[multi] = lat["tpot"]
        lat["tpot"] = tpot
    rejected = None if done.all() else status == "rejected"
    return _RowFigures(done, rejected, out_len, multi, lat, good)


def class_summary_of(f: ClassFigures, duration: float) -> dict[str, float]:
    rate = (lambda x: x / duration) if duration and duration > 0 else (lambda x: math.nan)
    s: dict[str, float] = {"requests": f.requests, "completed": f.completed, "rejected": f.rejected,
                           "request_throughput": rate(f.completed), "output_throughput": rate(f.output_tokens),
                           **f.stats}
    if f.good is not None:
        s["request_goodput"] = rate(f.good)
        s["slo_attainment"] = float(f.good / f.requests) if f.requests else math.nan
    return s


def class_summary(req: dict[str, np.ndarray], duration: float, slo: SLO | None) -> dict[str, float]:
    return class_summary_of(class_figures(req, slo), duration)


def figures_by(req: dict[str, np.ndarray], column: str, slo: SLO | None) -> dict[int, ClassFigures]:
    """Each value of `column` the table has (in increasing order): its rows' figures."""
    # One stable sort, each class a slice of it (rows in table order, as a mask would
    # take them): a mask per class and column costs classes x columns passes over the
    # table (100 replicas, 13 columns: 1,300 passes).
    col = req[column]
    if len(col) == 0:
        return {}
    rows = _row_figures(req, slo)
    every = _period(col)
    if every:  # class col[j] is rows j, j + every, ...: strided views, in table order as well
        return {int(col[j]): rows.of(slice(j, None, every))
                for j in np.argsort(col[:every], kind="stable").tolist()}
    order = np.argsort(col, kind="stable")
    values, starts = np.unique(col[order], return_index=True)
    ends = [*starts[1:], len(order)]
    return {int(v): rows.of(order[lo:hi]) for v, lo, hi in zip(values, starts, ends)}


def _period(col: np.ndarray) -> int:
    """m where the column repeats its first m values, all distinct, every m rows (a round-
    robin's replica column); 0 where it does not."""
    m = int(col.max()) - int(col.min()) + 1
    if not 1 < m < len(col) or len(np.unique(col[:m])) != m:
        return 0
    return m if np.array_equal(col[m:], col[:-m]) else 0


def breakdowns(req: dict[str, np.ndarray], slo: SLO | None = None,
               by_replica: dict[int, ClassFigures] | None = None) -> dict[str, dict[str, dict]]:
    """{"by_priority": {"0": {...}, "1": {...}}, "by_replica": {...}}: each breakdown
    whose column has more than one value in the run (a single class is the run itself).
    by_replica: the replicas' figures where they were computed already (figures_by of
    the replica column, as replica groups give them), not computed again here."""
    duration = run_duration(req)
    out = {}
    for key, column in BREAKDOWNS.items():
        if key == "by_replica" and by_replica is not None:
            figures = by_replica
        else:
            col = req[column]
            if len(col) == 0 or col.min() == col.max():
                continue
            figures = figures_by(req, column, slo)
        if len(figures) > 1:
            out[key] = {str(v): class_summary_of(f, duration) for v, f in sorted(figures.items())}
    return out
