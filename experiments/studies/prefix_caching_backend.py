"""The prefix-caching study on the real backend (reduced): batchlab-tiny on the CPU torch
backend serves a small multi-turn chat with caching on, and the simulator serves the
same workload with the same scheduler and pool; their hit rates are set side by side.
Arrivals are spread out (light load), so the two schedules, and hits, should agree.
Imported only with --backend."""
from __future__ import annotations

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost import LinearCostModel
from batchlab.core.workload import LengthSpec, WorkloadConfig, build_workload
from batchlab.experiments.studies.common import Progress, RowLog, pick
from batchlab.experiments.studies.common_backend import machine, serve
from batchlab.sim import simulate

PARAMS = {"full": dict(requests=40, rate=1.0, blocks=400), "small": dict(requests=16, rate=1.0, blocks=200)}
COLUMNS = ("world", "prefix_cache_hit_rate", "prefix_cache_hits", "prefix_cache_queries",
           "median_ttft_ms", "completed")


def run(out_dir, size: str, progress: Progress) -> dict:
    p = pick(PARAMS, size)
    w = build_workload(WorkloadConfig(
        source="multiturn", num_requests=p["requests"], rate=p["rate"], turns=4, turn_gap_s=1.5,
        system_prompt_len=64, prompt=LengthSpec(dist="uniform", low=8, high=40),
        output=LengthSpec(dist="uniform", low=4, high=16)))
    cfg = SchedulerConfig(policy="chunked", block_size=16, num_kv_blocks=p["blocks"],
                          prefix_caching=True)
    rows = {}
    with RowLog(out_dir / "backend_results.csv", COLUMNS) as log:
        for world, res in (("real", serve(w, cfg)),
                           ("sim", simulate(w, cfg, LinearCostModel(0.005), p["blocks"]))):
            s = res.summary()
            rows[world] = log.add({"world": world, **{k: s[k] for k in COLUMNS if k in s}})
            progress(f"backend study, {world}: hit rate {s['prefix_cache_hit_rate']:.1%}")
    return {"machine": machine(), "workload": w.describe(),
            "pool": f"{p['blocks']} blocks of 16 tokens", "rows": rows,
            "files": ["backend_results.csv"]}
