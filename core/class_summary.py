"""Latency and goodput broken down by a request column (priority class, replica), with
the names of core/summary.py. Rates are over the whole run's duration, so the classes'
throughputs and goodputs add up to the run's."""
from __future__ import annotations

import math

import numpy as np

from batchlab.core.summary import SLO, _stats, meets_slo, per_request_latencies, run_duration

# Which breakdowns a summary carries, and the request column each one reads.
BREAKDOWNS = {"by_priority": "priority", "by_replica": "replica"}


def class_summary(req: dict[str, np.ndarray], duration: float, slo: SLO | None) -> dict[str, float]:
    done = req["status"] == "finished"
    lat = per_request_latencies(req)
    rate = (lambda x: x / duration) if duration and duration > 0 else (lambda x: math.nan)
    s: dict[str, float] = {
        "requests": int(len(done)),
        "completed": int(done.sum()),
        "rejected": int((req["status"] == "rejected").sum()),
        "request_throughput": rate(int(done.sum())),
        "output_throughput": rate(int(req["output_len"][done].sum())),
    }
    for name, key in (("ttft", "ttft"), ("tpot", "tpot"), ("e2el", "e2el"), ("queueing_delay", "queue")):
        s.update(_stats(name, lat[key]))
    if slo is not None:
        ok = meets_slo(req, slo)
        s["request_goodput"] = rate(int(ok.sum()))
        s["slo_attainment"] = float(ok.sum() / len(done)) if len(done) else math.nan
    return s


def breakdowns(req: dict[str, np.ndarray], slo: SLO | None = None) -> dict[str, dict[str, dict]]:
    """{"by_priority": {"0": {...}, "1": {...}}, "by_replica": {...}}: each breakdown
    whose column has more than one value in the run (a single class is the run itself)."""
    duration = run_duration(req)
    out = {}
    for key, column in BREAKDOWNS.items():
        # One stable sort, each class a slice of it (rows in table order, as a mask would
        # take them): a mask per class and column costs classes x columns passes over the
        # table (100 replicas, 13 columns: 1,300 passes).
        col = req[column]
        if len(col) == 0 or col.min() == col.max():
            continue
        order = np.argsort(col, kind="stable")
        values, starts = np.unique(col[order], return_index=True)
        ends = [*starts[1:], len(order)]
        out[key] = {str(int(v)): class_summary({c: a[order[lo:hi]] for c, a in req.items()},
                                               duration, slo) for v, lo, hi in zip(values, starts, ends)}
    return out
