"""The Pareto table of a sweep: points no other point beats on both axes, cost (GPUs,
or dollars per hour from a GPU-hour price) and one metric (a latency, lower is better;
a goodput or a rate, higher is better). Only points that meet their criteria count."""
from __future__ import annotations

import math

HIGHER_IS_BETTER = ("answer", "rate", "request_throughput", "output_throughput",
                    "request_goodput", "slo_attainment")


def cost_key(rows: list[dict]) -> str:
    return "cost_per_hour" if rows and "cost_per_hour" in rows[0] else "gpus"


def pareto(rows: list[dict], metric: str) -> list[dict]:
    """Rows on the front, by rising cost."""
    sign = -1 if metric in HIGHER_IS_BETTER else 1
    x_key = cost_key(rows)
    ok = [r for r in rows if r.get("passes") and _num(r.get(x_key)) and _num(r.get(metric))]
    front = []
    for r in sorted(ok, key=lambda r: (r[x_key], sign * r[metric], r["point"])):
        if not front or sign * r[metric] < sign * front[-1][metric]:
            front.append(r)
    return front


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
