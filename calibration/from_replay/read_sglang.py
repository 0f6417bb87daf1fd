"""SGLang's `python -m sglang.bench_serving --output-file F.jsonl --output-details`: one
JSON object per line, a line appended per run (python/sglang/bench_serving.py). With
details each holds index-aligned input_lens, output_lens, ttfts (s), itls (s, a list per
request), errors ("" on success), plus the run's backend, dataset_name, request_rate and
max_concurrency.

It keeps no send times (newer versions may add start_times, used where present), so they
are rebuilt where the run's schedule makes them exact (rebuilt_sends.py); a Poisson run
without start_times cannot be replayed and is refused."""
from __future__ import annotations

from batchlab.calibration.from_replay.observed import ObservedReplay
from batchlab.calibration.from_replay.read_vllm import DETAILS, check_lists, from_object as vllm_object


def from_object(data: dict, where: str) -> ObservedReplay:
    """One run (a line of the file)."""
    check_lists(data, where, DETAILS, " (written without --output-details?)")
    return vllm_object(data, where, "sglang-bench", "SGLang keeps no send times")
