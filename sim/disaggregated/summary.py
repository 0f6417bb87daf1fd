"""What a disaggregated run adds to the summary: each pool's use and the KV transfers.

    {prefill,decode}_busy_fraction   seconds its replicas stepped / (replicas x duration): the
                                     share of time some sequence was prefilling (decoding),
                                     near 1 for a decode pool at any load ("stepping")
    decode_seats_full_fraction       seconds decode replicas stepped with every seat taken /
                                     (replicas x duration): how near its seats are to binding
    {prefill,decode}_slot_utilization  mean seats in use over its steps
    {prefill,decode}_kv_utilization    mean KV blocks in use over its steps
    kv_transfers, kv_transfer_bytes  hand-offs and the bytes they moved
    {mean,p99}_kv_transfer_ms        time on the link (latency + bytes / bandwidth)
    mean_kv_link_wait_ms             time a finished prefill waited for a free link (below 0:
                                     a layer-wise transfer began within its last step)
    {mean,p99}_decode_queue_ms       time an arrived KV waited for a decode replica's seat
    {prefill,decode}_stability       each pool's queue (core/stability.py): the requests'
                                     queueing delay is the prefill pool's alone, and a
                                     decode backlog shows only in TPOT; judged apart
    gpus, request_goodput_per_gpu    both pools' GPUs; goodput over them (with an SLO)

The pool figures need the step table (NaN without one)."""
from __future__ import annotations

import math

import numpy as np

from batchlab.core.stability import queue_stability
from batchlab.core.summary import SLO
from batchlab.sim.disaggregated.simulate import DisaggregatedResult


def pool_figures(run: DisaggregatedResult, duration: float) -> dict[str, float]:
    dep, steps = run.deployment, run.result.steps
    out: dict[str, float] = {}
    p = dep.prefill.replicas
    for name, pool, lo, hi in (("prefill", dep.prefill, 0, p), ("decode", dep.decode, p, p + dep.decode.replicas)):
        if steps is None or not duration > 0:
            out.update({f"{name}_busy_fraction": math.nan, f"{name}_slot_utilization": math.nan,
                        f"{name}_kv_utilization": math.nan})
            if name == "decode":
                out["decode_seats_full_fraction"] = math.nan
            continue
        mine = (steps["replica"] >= lo) & (steps["replica"] < hi)
        n = int(mine.sum())
        out[f"{name}_busy_fraction"] = float(steps["duration_s"][mine].sum() / (pool.replicas * duration))
        out[f"{name}_slot_utilization"] = (float((steps["num_seqs"][mine] / steps["seats"][mine]).mean())
                                           if n else math.nan)
        out[f"{name}_kv_utilization"] = (float((steps["kv_blocks_used"][mine] / steps["kv_blocks_total"][mine]).mean())
                                         if n else math.nan)
        if name == "decode":
            full = mine & (steps["num_seqs"] >= steps["seats"])
            out["decode_seats_full_fraction"] = float(steps["duration_s"][full].sum() / (pool.replicas * duration))
    return out


def transfer_figures(run: DisaggregatedResult) -> dict[str, float]:
    h = run.handoffs.table()
    on_link = (h["arrived_s"] - h["sent_s"]) * 1000
    wait = (h["sent_s"] - h["ready_s"]) * 1000
    n = len(on_link)
    return {"kv_transfers": n, "kv_transfer_bytes": int(h["kv_bytes"].sum()),
            "mean_kv_transfer_ms": float(on_link.mean()) if n else math.nan,
            "p99_kv_transfer_ms": float(np.percentile(on_link, 99)) if n else math.nan,
            "mean_kv_link_wait_ms": float(wait.mean()) if n else math.nan}


def pool_stability(run: DisaggregatedResult) -> tuple[str, str]:
    """Each pool's queue verdict: the prefill pool's from the requests' rows (arrival to
    first scheduled), the decode pool's from the hand-offs (KV arrived to admitted)."""
    req, h = run.result.requests, run.handoffs.table()
    row = {int(i): k for k, i in enumerate(req["request_id"])}
    at = np.array([row[int(i)] for i in h["request_id"]], dtype=np.int64)
    decode = {"status": req["status"][at] if len(at) else np.array([], dtype=object),
              "arrival_s": h["arrived_s"], "first_scheduled_s": h["admitted_s"],
              "finish_s": req["finish_s"][at] if len(at) else np.array([])}
    return queue_stability(req).verdict, queue_stability(decode).verdict


def stability(run: DisaggregatedResult) -> str:
    """The deployment's verdict: overloaded where either pool's queue grows."""
    return "stable" if pool_stability(run) == ("stable", "stable") else "overloaded"


def disaggregated_summary(run: DisaggregatedResult, slo: SLO | None = None) -> dict[str, float]:
    """The run's summary (the same keys as any run's) and the figures above."""
    s = run.result.summary(slo)
    s.update(pool_figures(run, s["duration"]))
    s.update(transfer_figures(run))
    h = run.handoffs.table()
    wait = (h["admitted_s"] - h["arrived_s"]) * 1000
    wait = wait[np.isfinite(wait)]
    s["mean_decode_queue_ms"] = float(wait.mean()) if len(wait) else math.nan
    s["p99_decode_queue_ms"] = float(np.percentile(wait, 99)) if len(wait) else math.nan
    s["prefill_stability"], s["decode_stability"] = pool_stability(run)
    s["gpus"] = run.deployment.gpus
    if slo is not None:
        s["request_goodput_per_gpu"] = s["request_goodput"] / s["gpus"]
    return s
