"""Which benchmark wrote a result object, told from the fields each writes and never from a
guess. vLLM (vllm/benchmarks/serve.py, as in vLLM's main at commit 009e6d4; and the older
benchmarks/benchmark_serving.py) heads its result with date, model_id, tokenizer_id,
num_prompts and burstiness; SGLang's bench_serving (python/sglang/bench_serving.py) with
dataset_name and the retokenized totals, and no model. One file holds one object (vLLM's
--save-result), or one object a line (vLLM's --append-result writes a newline and the next
run's JSON; SGLang appends a line a run)."""
from __future__ import annotations

from typing import Any

from batchlab.core import text_input

VLLM = "vllm"
SGLANG = "sglang"
VLLM_FIELDS = ("date", "model_id", "tokenizer_id", "num_prompts", "burstiness", "endpoint_type")
SGLANG_FIELDS = ("dataset_name", "total_output_tokens_retokenized", "random_range_ratio",
                 "sharegpt_output_len")


def which(obj: Any, where: str, expected: str) -> str:
    """VLLM or SGLANG for a result object with per-request details; a one-line ValueError
    where it is none, or could be either."""
    if not isinstance(obj, dict) or "input_lens" not in obj:
        raise ValueError(f"{where}: not a replay this reads (no input_lens / start_times); "
                         f"expected one of: {expected}")
    v = [k for k in VLLM_FIELDS if k in obj]
    s = [k for k in SGLANG_FIELDS if k in obj]
    if v and not s:
        return VLLM
    if s and not v:
        return SGLANG
    if not s and "start_times" in obj:  # send times kept: read as vLLM's, whoever wrote it
        return VLLM
    found = f"both vLLM's {', '.join(v)} and SGLang's {', '.join(s)}" if v else "neither benchmark's"
    raise ValueError(f"{where}: cannot tell whether vllm bench serve or SGLang bench_serving wrote "
                     f"it (it has {found} fields: vLLM's are {', '.join(VLLM_FIELDS)}; SGLang's "
                     f"{', '.join(SGLANG_FIELDS)}), and they are read differently; give the file as "
                     f"the benchmark wrote it")


def objects(path: str, text: str, expected: str) -> list[tuple[str, Any]]:
    """(where, parsed value) of each result in the file: the whole text where it is one
    JSON value, else one value a non-empty line (named `PATH line K`)."""
    try:
        return [(path, text_input.loads(text))]
    except text_input.DuplicateKey as e:
        raise ValueError(f"{path}: {e}") from None
    except ValueError as e:
        whole = e
    lines = [(k, line) for k, line in enumerate(text.split("\n"), 1) if line.strip()]
    if len(lines) < 2:
        raise ValueError(f"{path}: not JSON ({whole}); expected one of: {expected}") from None
    out = []
    for k, line in lines:
        where = f"{path} line {k}"
        try:
            out.append((where, text_input.loads(line)))
        except text_input.DuplicateKey as e:
            raise ValueError(f"{where}: {e}") from None
        except ValueError as e:
            raise ValueError(f"{where}: not JSON ({e}); expected one result object a line "
                             f"(--append-result, SGLang's --output-file)") from None
    return out
