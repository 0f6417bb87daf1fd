"""`vllm bench serve --save-result --save-detailed` result JSON: one object whose per-request
lists are index-aligned (vllm/benchmarks/serve.py): input_lens, output_lens, ttfts (s),
itls (s, one list per request: a gap per streamed chunk after the first), start_times
(perf_counter seconds at each send), errors ("" where the request succeeded). A failed
request has output_len 0 and ttft 0 there. With --append-result each run is one such
object on its own line (formats.py splits them). The older benchmarks/benchmark_serving.py
kept no start_times: its sends are rebuilt where its schedule makes them exact
(rebuilt_sends.py). batchlab replay writes the same file (result.json,
experiments/replay/results.py vllm_bench_json)."""
from __future__ import annotations

from batchlab.calibration.from_replay.observed import Builder, ObservedReplay
from batchlab.calibration.from_replay.rebuilt_sends import send_times

DETAILS = ("input_lens", "output_lens", "ttfts", "itls")
PER_REQUEST = DETAILS + ("start_times",)
OLD_VLLM = "vLLM's benchmark_serving.py before start_times kept no send times"


def check_lists(data: dict, where: str, fields: tuple[str, ...], hint: str) -> int:
    """The number of requests: every per-request field a list of as many; a one-line
    ValueError naming the first field that is not."""
    missing = [k for k in fields if k not in data]
    if missing:
        raise ValueError(f"{where}: no {missing[0]} field{hint}")
    if not isinstance(data["input_lens"], list):
        raise ValueError(f"{where}: input_lens is not a list (one length per request)")
    n = len(data["input_lens"])
    for k in fields + (("errors",) if data.get("errors") is not None else ()):
        v = data[k]
        if not isinstance(v, list) or len(v) != n:
            raise ValueError(f"{where}: {k} is not a list of {n} (one per request, as input_lens)")
    return n


def from_object(data: dict, where: str, fmt: str = "vllm-bench", no_sends: str = OLD_VLLM) -> ObservedReplay:
    """The replay in one parsed result object; a one-line ValueError naming `where` and the
    field where it is not vLLM's. Without start_times the sends are rebuilt (`no_sends`
    says why they are missing, in the error where they cannot be)."""
    hint = (" (written without --save-detailed?)" if any(k not in data for k in DETAILS) else "")
    n = check_lists(data, where, DETAILS, f"{hint}; expected vllm bench serve --save-result --save-detailed output")
    if "start_times" not in data:
        data = {**data, "start_times": send_times(data, where, no_sends)}
        if fmt == "vllm-bench":
            fmt = "vllm-bench without start_times: sends rebuilt"
    check_lists(data, where, PER_REQUEST, "")
    errors = data.get("errors") or [""] * n
    b = Builder(where, fmt)
    for i in range(n):
        gaps = data["itls"][i]
        if gaps is not None and not isinstance(gaps, list):
            b.row += 1
            b.drop("missing timings")
            continue
        b.add(data["start_times"][i], data["input_lens"][i], data["output_lens"][i],
              data["ttfts"][i], None, gaps, str(errors[i] or ""))
    model = data.get("model_id")
    settings = {k: data[k] for k in ("backend", "tokenizer_id") if data.get(k) is not None}
    return b.done(str(model) if model else None, settings)
