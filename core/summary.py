"""Summary of a run, with the field names `vllm bench serve` uses where one exists."""
from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

PERCENTILES = (90, 99)


class SLO(BaseModel):
    """Service-level objectives for goodput; a request counts if it meets all given."""
    model_config = ConfigDict(extra="forbid")
    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    e2el_ms: float | None = Field(None, gt=0)


def _stats(prefix: str, values_s: np.ndarray) -> dict[str, float]:
    v = np.asarray(values_s, dtype=float) * 1000.0
    if v.size == 0:
        nan = math.nan
        return {f"mean_{prefix}_ms": nan, f"median_{prefix}_ms": nan, f"std_{prefix}_ms": nan,
                **{f"p{p}_{prefix}_ms": nan for p in PERCENTILES}}
    out = {f"mean_{prefix}_ms": float(v.mean()), f"median_{prefix}_ms": float(np.median(v)),
           f"std_{prefix}_ms": float(v.std())}
    for p, x in zip(PERCENTILES, np.percentile(v, PERCENTILES)):
        out[f"p{p}_{prefix}_ms"] = float(x)
    return out


def per_request_latencies(req: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Seconds, for finished requests: ttft, tpot (over output_len > 1), e2el, queue."""
    done = req["status"] == "finished"
    arrival, first, finish = req["arrival_s"][done], req["first_token_s"][done], req["finish_s"][done]
    out_len = req["output_len"][done]
    multi = out_len > 1
    return {
        "ttft": first - arrival,
        "tpot": (finish[multi] - first[multi]) / (out_len[multi] - 1),
        "e2el": finish - arrival,
        "queue": req["first_scheduled_s"][done] - arrival,
    }


def summarize(req: dict[str, np.ndarray], steps: dict[str, np.ndarray], itl: np.ndarray,
              slo: SLO | None = None) -> dict[str, float]:
    done = req["status"] == "finished"
    n_done = int(done.sum())
    lat = per_request_latencies(req)
    if n_done:
        duration = float(np.nanmax(req["finish_s"][done]) - np.min(req["arrival_s"]))
    else:
        duration = math.nan
    in_tok = int(req["prompt_len"][done].sum())
    out_tok = int(req["output_len"][done].sum())

    def rate(x: float) -> float:
        return x / duration if duration and duration > 0 else math.nan

    s: dict[str, float] = {
        "completed": n_done,
        "rejected": int((req["status"] == "rejected").sum()),
        "unfinished": int(len(done) - n_done - (req["status"] == "rejected").sum()),
        "duration": duration,
        "total_input_tokens": in_tok,
        "total_output_tokens": out_tok,
        "request_throughput": rate(n_done),
        "output_throughput": rate(out_tok),
        "total_token_throughput": rate(in_tok + out_tok),
    }
    for name in ("ttft", "tpot"):
        s.update(_stats(name, lat[name]))
    s.update(_stats("itl", itl))
    s.update(_stats("e2el", lat["e2el"]))
    s.update(_stats("queueing_delay", lat["queue"]))
    seats = steps["seats"]
    s["num_steps"] = int(len(seats))
    s["slot_utilization"] = float(np.mean(steps["num_seqs"] / seats)) if len(seats) else math.nan
    s["kv_utilization"] = (float(np.mean(steps["kv_blocks_used"] / steps["kv_blocks_total"]))
                           if len(seats) else math.nan)
    s["preemptions"] = int(steps["num_preempted"].sum())
    if slo is not None:
        ok = np.ones(n_done, dtype=bool)
        multi = req["output_len"][done] > 1
        if slo.ttft_ms is not None:
            ok &= lat["ttft"] * 1000 <= slo.ttft_ms
        if slo.tpot_ms is not None:
            tpot = np.zeros(n_done)
            tpot[multi] = lat["tpot"]
            ok &= tpot * 1000 <= slo.tpot_ms
        if slo.e2el_ms is not None:
            ok &= lat["e2el"] * 1000 <= slo.e2el_ms
        s["request_goodput"] = rate(int(ok.sum()))
        s["slo_attainment"] = float(ok.mean()) if n_done else math.nan
    return s
