"""A replay's outcomes as the tables every batchlab run writes, and as `vllm bench
serve`'s result JSON.

requests.csv has the columns of simulate and run. Times are seconds from the replay's
start on the client's clock: arrival_s is when the request was sent, first_token_s and
finish_s when its first chunk and the end of its stream came. A client cannot see
scheduling, so first_scheduled_s is empty (queueing delay: none) and there is no step
table. output_len is what the server generated (its usage count, else the chunks); a
failed request has status `failed` and its reason in reject_reason; a reply whose
server's claims disagree with what came (claims.py) has status `invalid` and its reason
there: neither is averaged in (only `finished` rows are)."""
from __future__ import annotations

import datetime
import math

import numpy as np

from batchlab.core.metrics import REQUEST_COLUMNS
from batchlab.core.result import RunResult
from batchlab.core.run_meta import RunMeta
from batchlab.experiments.replay.outcome import Outcome
from batchlab.experiments.replay.sender import Replay

NO_STEPS = {"num_steps": 0, "seat_fraction": 0.0, "kv_fraction": 0.0, "preemptions": 0}


def request_table(rep: Replay) -> dict[str, np.ndarray]:
    """The columns of core.metrics.REQUEST_COLUMNS, by workload index. cached_tokens is
    there only if the server reported it (usage.prompt_tokens_details.cached_tokens, as
    vLLM does with prefix caching on): a client cannot otherwise tell a cache hit."""
    rows = [rep.outcomes[i] for i in sorted(rep.outcomes)]
    t0, nan = rep.t0, math.nan

    def rel(o: Outcome, t: float) -> float:
        return t - t0 if not o.error and t >= 0 else nan

    cols = {
        "request_id": [o.index for o in rows], "replica": [0] * len(rows),
        "arrival_s": [o.start - t0 for o in rows], "prompt_len": [o.prompt_len for o in rows],
        "output_len": [o.requested if o.error else o.output_tokens for o in rows],
        "priority": [0] * len(rows), "first_scheduled_s": [nan] * len(rows),
        "first_token_s": [rel(o, o.first) for o in rows], "finish_s": [rel(o, o.end) for o in rows],
        "preemptions": [0] * len(rows), "status": [_status(o) for o in rows],
        "reject_reason": [o.error or o.invalid for o in rows],
    }
    if any(o.cached_tokens is not None for o in rows):
        cols["cached_tokens"] = [o.cached_tokens if o.ok and o.cached_tokens else 0 for o in rows]
    text = {"status", "reject_reason"}
    floats = {"arrival_s", "first_scheduled_s", "first_token_s", "finish_s"}
    return {c: np.array(cols[c], dtype=object if c in text else float if c in floats else np.int64)
            for c in REQUEST_COLUMNS if c in cols}


def _status(o: Outcome) -> str:
    return "finished" if o.ok else "failed" if o.error else "invalid"


def itl_gaps(rep: Replay) -> np.ndarray:
    gaps = [np.diff(o.token_times) for o in rep.outcomes.values() if o.ok and len(o.token_times) > 1]
    return np.concatenate(gaps) if gaps else np.zeros(0)


def run_result(rep: Replay, meta: dict) -> RunResult:
    gaps = itl_gaps(rep)
    info = {"world": "real", "source": "replay", "replicas": 1, "interrupted": rep.interrupted,
            "unobserved": ["first_scheduled_s"],  # a client cannot see scheduling
            "requests_sent": len(rep.outcomes),
            "failed": sum(bool(o.error) for o in rep.outcomes.values()),
            "invalid": sum(bool(o.invalid) for o in rep.outcomes.values()), **meta}
    return RunResult(request_table(rep), None, gaps, np.ones(len(gaps), np.int64), RunMeta(**info), dict(NO_STEPS))


def failure_summary(rep: Replay) -> str:
    """'' when every request finished with a valid reply, else one line: how many failed
    and how many were invalid, and why (the most common reasons first)."""
    parts = []
    for kind, why in (("failed", lambda o: o.error), ("invalid", lambda o: o.invalid)):
        reasons: dict[str, int] = {}
        for o in rep.outcomes.values():
            if why(o):
                key = why(o).split(" (")[0][:120]
                reasons[key] = reasons.get(key, 0) + 1
        if reasons:
            top = sorted(reasons.items(), key=lambda kv: -kv[1])
            shown = "; ".join(f"{n} x {r}" for r, n in top[:3]) + ("; ..." if len(top) > 3 else "")
            parts.append(f"{sum(reasons.values())} of {len(rep.outcomes)} requests {kind}: {shown}")
    return "; ".join(parts)


def vllm_bench_json(rep: Replay, summary: dict, meta: RunMeta, request_rate: float | str,
                    burstiness: float) -> dict:
    """The result file of `vllm bench serve --save-result`: its field names, its units
    (per-request ttfts and itls in seconds, the statistics in ms). request_rate, burstiness:
    the workload's, as vLLM records them."""
    rows = [rep.outcomes[i] for i in sorted(rep.outcomes)]
    ok = [o for o in rows if o.ok]
    per_second: dict[int, int] = {}
    for o in ok:
        for t in o.token_times:
            k = int(t - rep.t0)
            per_second[k] = per_second.get(k, 0) + 1
    out = {
        "date": datetime.datetime.now().strftime("%Y%m%d-%H%M%S"),
        "backend": "openai", "endpoint_type": "openai", "label": "batchlab replay",
        "model_id": meta.model, "tokenizer_id": None,
        "num_prompts": len(rows), "request_rate": request_rate,
        "burstiness": burstiness, "max_concurrency": meta.max_concurrency,
        "duration": summary["duration"], "completed": len(ok),
        "failed": sum(bool(o.error) for o in rows), "invalid": sum(bool(o.invalid) for o in rows),
        "total_input_tokens": summary["total_input_tokens"],
        "total_output_tokens": summary["total_output_tokens"],
        "request_throughput": summary["request_throughput"],
        "request_goodput": summary.get("request_goodput"),
        "output_throughput": summary["output_throughput"],
        "total_token_throughput": summary["total_token_throughput"],
        "max_output_tokens_per_s": float(max(per_second.values(), default=0)),
        "max_concurrent_requests": _max_concurrent(rows),
        "input_lens": [o.prompt_len for o in rows],
        "output_lens": [o.output_tokens if o.ok else 0 for o in rows],
        "ttfts": [o.first - o.start if o.ok else 0.0 for o in rows],
        "itls": [np.diff(o.token_times).tolist() if o.ok else [] for o in rows],
        "start_times": [o.start - rep.t0 for o in rows],
        "generated_texts": [o.text for o in rows],
        "errors": [o.error for o in rows],
        "response_ids": [o.response_id for o in rows],  # not vLLM's: matches server records
    }
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p90", "p99"):
            out[f"{stat}_{metric}_ms"] = summary.get(f"{stat}_{metric}_ms")
        out[f"p50_{metric}_ms"] = summary.get(f"median_{metric}_ms")
    return out


def _max_concurrent(rows: list[Outcome]) -> int:
    events = sorted([(o.start, 1) for o in rows] + [(o.end, -1) for o in rows if o.end >= 0])
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    return peak
