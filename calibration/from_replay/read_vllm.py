"""`vllm bench serve --save-result --save-detailed` result JSON: one object whose per-request
lists are index-aligned (vllm/benchmarks/serve.py): input_lens, output_lens, ttfts (s),
itls (s, one list per request: a gap per streamed chunk after the first), start_times
(perf_counter seconds at each send), errors ("" where the request succeeded). A failed
request has output_len 0 and ttft 0 there. batchlab replay writes the same file
(result.json, experiments/replay/results.py vllm_bench_json)."""
from __future__ import annotations

from pathlib import Path

from batchlab.calibration.from_replay.observed import Builder, ObservedReplay

PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "start_times")


def looks_like(data: object) -> bool:
    return isinstance(data, dict) and "input_lens" in data and "start_times" in data


def from_object(data: dict, where: str, fmt: str = "vllm-bench") -> ObservedReplay:
    """The replay in one parsed result object; a one-line ValueError naming `where` and the
    field where it is not vLLM's."""
    missing = [k for k in PER_REQUEST if k not in data]
    if missing:
        detail = " (written without --save-detailed?)" if "ttfts" in missing or "itls" in missing else ""
        raise ValueError(f"{where}: no {missing[0]} field{detail}; expected vllm bench serve "
                         f"--save-result --save-detailed output")
    n = len(data["input_lens"])
    for k in PER_REQUEST + (("errors",) if data.get("errors") is not None else ()):
        v = data[k]
        if not isinstance(v, list) or len(v) != n:
            raise ValueError(f"{where}: {k} is not a list of {n} (one per request, as input_lens)")
    errors = data.get("errors") or [""] * n
    b = Builder(where, fmt)
    for i in range(n):
        gaps = data["itls"][i]
        if gaps is not None and not isinstance(gaps, list):
            b.drop("missing timings")
            continue
        b.add(data["start_times"][i], data["input_lens"][i], data["output_lens"][i],
              data["ttfts"][i], None, gaps, str(errors[i] or ""))
    model = data.get("model_id")
    settings = {k: data[k] for k in ("backend", "tokenizer_id") if data.get(k) is not None}
    return b.done(str(model) if model else None, settings)


def read(path: Path, data: dict) -> ObservedReplay:
    return from_object(data, str(path))
