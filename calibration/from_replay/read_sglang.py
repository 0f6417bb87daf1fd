"""SGLang's `python -m sglang.bench_serving --output-file F.jsonl --output-details`: one
JSON object per line, a line appended per run (python/sglang/bench_serving.py). With
details each holds index-aligned input_lens, output_lens, ttfts (s), itls (s, a list per
request), errors ("" on success), plus the run's backend, request_rate and max_concurrency.

It keeps no send times (newer versions may add start_times, used where present), so they
are rebuilt where the run's schedule makes them exact: request_rate inf without
max_concurrency sends every request at 0; with max_concurrency N, each request goes out as
one of N slots frees (the earliest finish: send + ttft + the gaps). A Poisson run without
start_times cannot be replayed and is refused."""
from __future__ import annotations

import heapq
import math
from pathlib import Path

from batchlab.calibration.from_replay.observed import ObservedReplay
from batchlab.calibration.from_replay.read_vllm import from_object
from batchlab.core import text_input

DETAILS = ("input_lens", "output_lens", "ttfts", "itls")


def looks_like(path: Path, text: str) -> bool:
    first = text.lstrip().split("\n", 1)[0]
    try:
        obj = text_input.loads(first)
    except ValueError:
        return False
    return isinstance(obj, dict) and "input_lens" in obj and "start_times" not in obj \
        and ("request_rate" in obj or path.suffix == ".jsonl")


def _rate(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def send_times(data: dict, where: str) -> list[float]:
    """When each request went out, rebuilt from the run's schedule (see the docstring)."""
    n = len(data["input_lens"])
    rate, conc = _rate(data.get("request_rate")), data.get("max_concurrency")
    if rate != math.inf:
        raise ValueError(f"{where}: request_rate {data.get('request_rate')!r} without start_times: "
                         f"SGLang keeps no send times, so only a request_rate inf run can be replayed")
    if conc is None:
        return [0.0] * n
    if not isinstance(conc, int) or conc < 1:
        raise ValueError(f"{where}: max_concurrency {conc!r}; expected a positive integer or null")
    free = [0.0] * min(conc, n)  # when each slot frees
    out = []
    for i in range(n):
        t = heapq.heappop(free)
        out.append(t)
        gaps = data["itls"][i] if isinstance(data["itls"][i], list) else []
        ttft = data["ttfts"][i] if isinstance(data["ttfts"][i], (int, float)) else 0.0
        heapq.heappush(free, t + ttft + sum(g for g in gaps if isinstance(g, (int, float))))
    return out


def read(path: Path, text: str) -> list[ObservedReplay]:
    """Every run (line) of the file."""
    out = []
    for k, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path} line {k}"
        try:
            data = text_input.loads(line)
        except text_input.DuplicateKey as e:
            raise ValueError(f"{where}: {e}") from None
        except ValueError as e:
            raise ValueError(f"{where}: not JSON ({e}); expected one SGLang bench_serving result a line") from None
        if not isinstance(data, dict):
            raise ValueError(f"{where}: not a JSON object; expected an SGLang bench_serving result")  # noqa: TRY004
        missing = [d for d in DETAILS if d not in data]
        if missing:
            raise ValueError(f"{where}: no {missing[0]} field (written without --output-details?)")
        for d in DETAILS:
            if not isinstance(data[d], list) or len(data[d]) != len(data["input_lens"]):
                raise ValueError(f"{where}: {d} is not a list of {len(data['input_lens'])} "
                                 f"(one per request, as input_lens)")
        if "start_times" not in data:
            data = {**data, "start_times": send_times(data, where)}
        out.append(from_object(data, where, "sglang-bench"))
    if not out:
        raise ValueError(f"{path}: empty; expected SGLang bench_serving results, one a line")
    return out
