"""What the prefix-caching study and its --backend variant share (both import this
module; neither imports the other): the workloads, the SLO, and the figures measured
from a run."""
from __future__ import annotations

from batchlab.core.config import SchedulerConfig
from batchlab.core.result import RunResult
from batchlab.core.summary import SLO
from batchlab.core.workload import WorkloadConfig, build_workload
from batchlab.core.workload.transforms import set_rate

NAME = "prefix-caching"
MODEL, HARDWARE, POLICY, SEED = "llama-3-8b", "a100-80gb", "chunked", 0
SLO_SPEC = SLO(ttft_ms=2000, tpot_ms=100)
# Mooncake at a quarter of its lengths (prompts ~3,400 tokens, its 512-token hash blocks
# 128): at full length one A100 holds the KV of ~35 prompts, far less than the trace's
# reuse distance, and the study would show the pool, not the cache.
MOONCAKE_SCALE = 4
COLUMNS = ("workload", "caching", "router", "replicas", "rate", "prefix_cache_hit_rate",
           "median_ttft_ms", "p99_ttft_ms", "p99_tpot_ms", "output_throughput",
           "request_throughput", "completed", "meets_slo", "search")


def workload(kind: str, n: int, rate: float, seed: int = SEED):
    """kind: mooncake (the shipped trace) or multiturn (the preset), its whole timeline
    scaled to a mean of `rate` requests/s (for multi-turn chat, think times with it:
    otherwise a faster conversation rate with fixed turns and gaps never overloads)."""
    if kind == "mooncake":
        return build_workload(WorkloadConfig(source="mooncake", num_requests=n, rate=rate,
                                             length_scale=MOONCAKE_SCALE))
    w = build_workload(WorkloadConfig(source="multiturn", num_requests=n, seed=seed))
    return set_rate(w, rate)


def scheduler(caching: bool, **kw) -> SchedulerConfig:
    return SchedulerConfig(policy=POLICY, prefix_caching=caching, **kw)


def meets(s: dict, n: int, slo: SLO = SLO_SPEC) -> bool:
    return (s["completed"] == n and s["p99_ttft_ms"] <= slo.ttft_ms
            and s["p99_tpot_ms"] <= slo.tpot_ms)


def measure(res: RunResult, n: int, **labels) -> dict:
    s = res.summary(SLO_SPEC)
    return {**labels, **{k: s[k] for k in COLUMNS if k in s}, "meets_slo": meets(s, n)}
