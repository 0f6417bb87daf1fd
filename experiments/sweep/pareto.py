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


PER_GPU, PER_USER = "tokens_per_s_per_gpu", "tokens_per_s_per_user"


def with_rates(row: dict) -> dict:
    """row with vLLM's Pareto axes: output tokens/s per GPU (the deployment's output
    throughput over its GPUs) and per user (1000 / median TPOT: the decode speed a user
    sees); NaN where the row has neither."""
    gpus, out, tpot = row.get("gpus"), row.get("output_throughput"), row.get("median_tpot_ms")
    per_gpu = out / gpus if _num(out) and _num(gpus) and gpus > 0 else math.nan
    per_user = 1000.0 / tpot if _num(tpot) and tpot > 0 else math.nan
    return {**row, PER_GPU: per_gpu, PER_USER: per_user}


def throughput_front(rows: list[dict]) -> list[dict]:
    """Passing rows no other passing row beats on both tokens/s per GPU and per user
    (both higher is better), by rising tokens/s per user."""
    ok = [r for r in rows if r.get("passes") and _num(r.get(PER_GPU)) and _num(r.get(PER_USER))]
    front = []
    for r in sorted(ok, key=lambda r: (-r[PER_GPU], -r[PER_USER], r.get("point", 0))):
        if not front or r[PER_USER] > front[-1][PER_USER]:
            front.append(r)
    return sorted(front, key=lambda r: r[PER_USER])


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
