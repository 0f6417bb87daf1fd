"""One sweep point, as a task any executor can run: a simulation (the capacity point
row: metrics over the samples, stability, whether it meets the SLOs) or a capacity
search (its answer row)."""
from __future__ import annotations

import math

from batchlab.core.summary import SLO
from batchlab.experiments.capacity.point import Criteria, evaluate, sample_configs
from batchlab.experiments.capacity.report import answer_row
from batchlab.experiments.capacity.search import search_max_rate, search_replicas
from batchlab.experiments.errors import UserError
from batchlab.experiments.sweep.grid import Point, SweepSettings


def criteria_for(point: Point, s: SweepSettings) -> Criteria:
    return Criteria(point.config.run.slo or SLO(), s.percentile, s.goodput, s.max_rejected_share,
                    s.count_too_long)


def run_point(task: tuple[Point, SweepSettings]) -> dict:
    point, s = task
    cfg = point.config
    head = {"point": point.index, "point_hash": point.key,
            **{f: _cell(v) for f, v in point.values.items()}}
    crit = criteria_for(point, s)
    try:
        samples = sample_configs(cfg.workload, s.seeds, s.windows)
        if s.point == "simulate":
            row = evaluate(cfg, crit, samples)
        elif s.point == "max-rate":
            a = search_max_rate(cfg, crit, samples, rel_tol=s.tolerance)
            row = {**answer_row(a, None, crit), "passes": a.value is not None}
        else:
            a = search_replicas(cfg, crit, samples, s.max_replicas)
            row = {**answer_row(a, None, crit), "passes": a.value is not None}
    except UserError as e:  # a point that cannot run (a model that does not fit): a row
        row = {"passes": False, "error": str(e)}
    row = {**head, **row}
    row.setdefault("gpus", math.nan)
    if s.gpu_hour_price is not None:
        row["cost_per_hour"] = row["gpus"] * s.gpu_hour_price
    return row


def _cell(v):
    return v if isinstance(v, (int, float, str, bool)) else str(v)
