"""Send times a benchmark did not keep, rebuilt where the run's schedule makes them exact:
SGLang bench_serving (python/sglang/bench_serving.py) never keeps them, vLLM's
benchmarks/benchmark_serving.py kept none (as at vLLM commit 0049e29: date, model_id, ...,
input_lens, ttfts, itls, no start_times) before its results gained start_times (vLLM's
vllm/benchmarks/serve.py writes them, as at commit 009e6d4). request_rate inf without max_concurrency sends every
request at 0; with max_concurrency N, each request goes out as one of N slots frees (the
earliest finish: send + ttft + the gaps). A Poisson or gamma run cannot be rebuilt: the
sends were random draws nobody kept, and is refused."""
from __future__ import annotations

import heapq
import math


def _rate(v) -> float:
    if isinstance(v, bool):
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def send_times(data: dict, where: str, who: str) -> list[float]:
    """When each request went out (see the module docstring); `who` names the benchmark
    in the error, e.g. 'SGLang keeps no send times'."""
    n = len(data["input_lens"])
    rate, conc = _rate(data.get("request_rate")), data.get("max_concurrency")
    if rate != math.inf:
        raise ValueError(f"{where}: request_rate {data.get('request_rate')!r} without start_times: "
                         f"{who}, so only a request_rate inf run can be replayed")
    if conc is None:
        return [0.0] * n
    if isinstance(conc, bool) or not isinstance(conc, int) or conc < 1:
        raise ValueError(f"{where}: max_concurrency {conc!r}; expected a positive integer or null")
    free = [0.0] * min(conc, n)  # when each slot frees
    out = []
    for i in range(n):
        t = heapq.heappop(free)
        out.append(t)
        gaps = data["itls"][i] if isinstance(data["itls"][i], list) else []
        ttft = data["ttfts"][i] if _number(data["ttfts"][i]) else 0.0
        heapq.heappush(free, t + ttft + sum(g for g in gaps if _number(g)))
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
