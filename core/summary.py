"""Summary of a run, with the field names `vllm bench serve` uses where one exists."""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from batchlab.core.checks import Positive

PERCENTILES = (90, 99)
# A table of this many requests has its latencies' figures computed two at a time: numpy
# lets go of the GIL in its passes, and the parent of a split run (--workers) has the
# cores to itself once its workers are done.
THREADED_ROWS = 100_000


class SLO(BaseModel):
    """Service-level objectives for goodput; a request counts if it meets all given."""
    model_config = ConfigDict(extra="forbid")
    ttft_ms: Positive | None = None
    tpot_ms: Positive | None = None
    e2el_ms: Positive | None = None


def _stats(prefix: str, values_s: np.ndarray, counts: np.ndarray | None = None) -> dict[str, float]:
    """Mean, median, std and percentiles in ms; counts[i] repeats values_s[i] (same
    figures as numpy over the repeated values, without building them)."""
    v = np.asarray(values_s, dtype=float) * 1000.0
    w = None if counts is None else np.asarray(counts, np.int64)
    total = len(v) if w is None else int(w.sum())
    if total == 0:
        nan = math.nan
        return {f"mean_{prefix}_ms": nan, f"median_{prefix}_ms": nan, f"std_{prefix}_ms": nan,
                **{f"p{p}_{prefix}_ms": nan for p in PERCENTILES}}
    if w is None:
        mean, std = float(v.mean()), float(v.std())
        # v is this function's own copy: partitioned in place (the same order statistics).
        pcts = np.percentile(v, (50, *PERCENTILES), overwrite_input=True)
    else:
        mean = float((v * w).sum() / total)
        std = float(np.sqrt((w * (v - mean) ** 2).sum() / total))
        pcts = weighted_percentiles(v, w, (50, *PERCENTILES))
    out = {f"mean_{prefix}_ms": mean, f"median_{prefix}_ms": float(pcts[0]), f"std_{prefix}_ms": std}
    for p, x in zip(PERCENTILES, pcts[1:]):
        out[f"p{p}_{prefix}_ms"] = float(x)
    return out


def _latency_stats(lat: dict[str, np.ndarray]) -> list[dict[str, float]]:
    """_stats of ttft, tpot, e2el and the queueing delay (each on its own: the same
    figures whichever thread computes them)."""
    names, columns = ("ttft", "tpot", "e2el", "queueing_delay"), [lat[c] for c in ("ttft", "tpot", "e2el", "queue")]
    if len(columns[2]) < THREADED_ROWS:
        return [_stats(n, c) for n, c in zip(names, columns)]
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(_stats, names, columns))


def weighted_percentiles(values: np.ndarray, counts: np.ndarray, q: tuple[float, ...]) -> np.ndarray:
    """np.percentile (linear interpolation) of `values` each repeated `counts` times."""
    order = np.argsort(values, kind="stable")
    v, cum = values[order], np.cumsum(counts[order])
    h = (cum[-1] - 1) * np.asarray(q, float) / 100.0  # position in the repeated, sorted array
    lo = np.floor(h)
    below = v[np.searchsorted(cum, lo, side="right")]
    above = v[np.searchsorted(cum, np.minimum(lo + 1, cum[-1] - 1), side="right")]
    return below + (h - lo) * (above - below)


def per_request_latencies(req: dict[str, np.ndarray], done: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Seconds, for finished requests: ttft, tpot (over output_len > 1), e2el, queue.
    done: req["status"] == "finished", where the caller has it already."""
    done = req["status"] == "finished" if done is None else done
    every = bool(done.all())
    arrival, first, finish, out_len, scheduled = (
        _finished(req[c], done, every) for c in ("arrival_s", "first_token_s", "finish_s", "output_len",
                                                 "first_scheduled_s"))
    multi = out_len > 1
    if not multi.all():  # else the same values without three masked copies
        finish_m, first_m, out_m = finish[multi], first[multi], out_len[multi]
    else:
        finish_m, first_m, out_m = finish, first, out_len
    return {
        "ttft": first - arrival,
        "tpot": (finish_m - first_m) / (out_m - 1),
        "e2el": finish - arrival,
        "queue": scheduled - arrival,
    }


def _finished(col: np.ndarray, done: np.ndarray, every: bool) -> np.ndarray:
    """col's finished rows (done); every: all of them, the column itself (a masked copy
    would be the same values)."""
    return col if every else col[done]


def prefix_cache_stats(req: dict[str, np.ndarray]) -> dict[str, float]:
    """vLLM's prefix_cache_queries / prefix_cache_hits, in tokens: the prompt tokens of
    every request scheduled, and how many its first admission found cached."""
    if "cached_tokens" not in req:  # a table from before prefix caching
        return {}
    scheduled = ~np.isnan(req["first_scheduled_s"])
    every = bool(scheduled.all())  # then the columns themselves: integer sums, the same
    queries = int(_finished(req["prompt_len"], scheduled, every).sum())
    hits = int(_finished(req["cached_tokens"], scheduled, every).sum())
    return {"prefix_cache_queries": queries, "prefix_cache_hits": hits,
            "prefix_cache_hit_rate": hits / queries if queries else math.nan}


def run_duration(req: dict[str, np.ndarray], done: np.ndarray | None = None) -> float:
    """First arrival to last finish (NaN: nothing finished). done: as per_request_latencies."""
    done = req["status"] == "finished" if done is None else done
    if not done.any():
        return math.nan
    return float(np.nanmax(_finished(req["finish_s"], done, bool(done.all()))) - np.min(req["arrival_s"]))


def meets_slo(req: dict[str, np.ndarray], slo: SLO,
              lat: dict[str, np.ndarray] | None = None, done: np.ndarray | None = None) -> np.ndarray:
    """Per finished request (in table order): whether it met every given objective
    (a one-token reply has no TPOT: it meets any TPOT objective). done: as per_request_latencies."""
    done = req["status"] == "finished" if done is None else done
    lat = per_request_latencies(req) if lat is None else lat
    ok = np.ones(int(done.sum()), dtype=bool)
    if slo.ttft_ms is not None:
        ok &= lat["ttft"] * 1000 <= slo.ttft_ms
    if slo.tpot_ms is not None:
        tpot = lat["tpot"]
        if len(tpot) < len(ok):  # one-token replies: 0
            tpot = np.zeros(len(ok))
            tpot[_finished(req["output_len"], done, len(ok) == len(done)) > 1] = lat["tpot"]
        ok &= tpot * 1000 <= slo.tpot_ms
    if slo.e2el_ms is not None:
        ok &= lat["e2el"] * 1000 <= slo.e2el_ms
    return ok


def step_totals(steps: dict[str, np.ndarray]) -> dict[str, float]:
    """What the summary needs from a step table (MetricsRecorder.totals keeps the same
    sums when no table is recorded)."""
    return {"num_steps": len(steps["seats"]),
            "seat_fraction": ratio_total(_by_denominator(steps["num_seqs"], steps["seats"])),
            "kv_fraction": ratio_total(_by_denominator(steps["kv_blocks_used"], steps["kv_blocks_total"])),
            "preemptions": int(steps["num_preempted"].sum())}


def _by_denominator(numerators: np.ndarray, denominators: np.ndarray) -> dict[int, int]:
    dens, which = np.unique(denominators, return_inverse=True)
    totals = np.zeros(len(dens), np.int64)
    np.add.at(totals, which.ravel(), numerators.astype(np.int64))
    return {int(d): int(t) for d, t in zip(dens, totals)}


def ratio_total(by_denominator: dict[int, int]) -> float:
    """Sum over steps of numerator / denominator, given each denominator's numerators
    summed (exact integers): one division per denominator, added in increasing order of
    denominator, so the figure does not depend on the order the steps came in."""
    total = 0.0
    for d in sorted(by_denominator):
        total += by_denominator[d] / d
    return total


@dataclass
class StepSums:
    """What a run's totals are made of, in exact integers (ratio_total's input): runs of
    disjoint replicas add them and divide once, as one run of them all would."""
    num_steps: int
    seated: dict[int, int]  # seats -> sequences summed over steps
    kv_used: dict[int, int]  # KV blocks in all -> blocks used summed over steps
    preemptions: int

    @property
    def totals(self) -> dict[str, int | float]:
        """num_steps, seat_fraction and kv_fraction (summed over steps), preemptions."""
        return {"num_steps": self.num_steps, "seat_fraction": ratio_total(self.seated),
                "kv_fraction": ratio_total(self.kv_used), "preemptions": self.preemptions}

    def __add__(self, other: "StepSums") -> "StepSums":
        return StepSums(self.num_steps + other.num_steps, _add(self.seated, other.seated),
                        _add(self.kv_used, other.kv_used), self.preemptions + other.preemptions)


def _add(a: dict[int, int], b: dict[int, int]) -> dict[int, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def summarize(req: dict[str, np.ndarray], steps: dict[str, float],
              itl: tuple[np.ndarray, np.ndarray], slo: SLO | None = None) -> dict[str, float]:
    """steps: step_totals(); itl: (gaps, counts) as MetricsRecorder.itl() gives them."""
    # Each pass over the status column (Python objects) costs ~10 ns a request: once each.
    done = req["status"] == "finished"
    n_done = int(done.sum())
    every = n_done == len(done)  # then none was rejected: no second pass over the statuses
    n_rejected = 0 if every else int((req["status"] == "rejected").sum())
    lat = per_request_latencies(req, done)
    duration = run_duration(req, done)
    in_tok = int(_finished(req["prompt_len"], done, every).sum())
    out_tok = int(_finished(req["output_len"], done, every).sum())

    def rate(x: float) -> float:
        return x / duration if duration and duration > 0 else math.nan

    s: dict[str, float] = {
        "completed": n_done,
        "rejected": n_rejected,
        "unfinished": int(len(done) - n_done - n_rejected),
        "duration": duration,
        "total_input_tokens": in_tok,
        "total_output_tokens": out_tok,
        "request_throughput": rate(n_done),
        "output_throughput": rate(out_tok),
        "total_token_throughput": rate(in_tok + out_tok),
    }
    ttft, tpot, e2el, queue = _latency_stats(lat)
    s.update(ttft)
    s.update(tpot)
    s.update(_stats("itl", *itl))
    s.update(e2el)
    s.update(queue)
    n = steps["num_steps"]
    s["num_steps"] = int(n)
    s["slot_utilization"] = steps["seat_fraction"] / n if n else math.nan
    s["kv_utilization"] = steps["kv_fraction"] / n if n else math.nan
    s["preemptions"] = int(steps["preemptions"])
    s.update(prefix_cache_stats(req))
    if slo is not None:
        ok = meets_slo(req, slo, lat, done)
        s["request_goodput"] = rate(int(ok.sum()))
        # Over every request: a rejected or unfinished one did not meet the objectives.
        s["slo_attainment"] = float(ok.sum() / len(done)) if len(done) else math.nan
    return s
