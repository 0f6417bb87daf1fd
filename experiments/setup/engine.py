"""Scheduler defaults that follow vLLM's OpenAI API server where the hardware is known
(vLLM's EngineArgs defaults by usage context, since v0.9: PR #17885 kept the A100 out of
the large defaults): on a GPU of 70 GiB or more other than the A100, 1024 sequences and
8192 batched tokens; otherwise 256 and 2048. The KV pool: vLLM's gpu_memory_utilization
0.9 of the GPU's memory, less the weights. The token
budget applies to policies that chunk prefills (vLLM's V1 engine always does); a
policy that does not keeps its own budget (a whole prompt must fit in one step, as
vLLM without chunked prefill sizes it to max_model_len)."""
from __future__ import annotations

from dataclasses import dataclass

from batchlab.core.config import SchedulerConfig
from batchlab.core.schedulers import policy_class
from batchlab.core.schedulers.chunked import ChunkedPrefillScheduler
from batchlab.core.model.hardware import HardwareSpec

LARGE_GPU_BYTES = 70 * 2**30


@dataclass(frozen=True)
class EngineDefaults:
    max_num_seqs: int
    max_num_batched_tokens: int
    why: str


def engine_defaults(hw: HardwareSpec) -> EngineDefaults:
    if hw.memory_bytes >= LARGE_GPU_BYTES and not hw.name.startswith("a100"):
        return EngineDefaults(1024, 8192, f"vLLM >= 0.9 API server's rule for {hw.name} (>= 70 GiB, "
                              f"not an A100); a server started with other limits needs --max-num-seqs")
    return EngineDefaults(256, 2048, f"vLLM >= 0.9 API server's rule for {hw.name} (an A100 or < 70 GiB); "
                          f"a server started with other limits needs --max-num-seqs")


def kv_pool_default(h) -> str:
    """Where the KV pool's size comes from when --num-kv-blocks is not given."""
    given = "given" if "gpu_memory_utilization" in h.model_fields_set else "vLLM's default"
    return f"gpu_memory_utilization {h.gpu_memory_utilization:g} ({given}) of memory, less the weights"


def apply_engine_defaults(sc: SchedulerConfig, given: set[str], d: EngineDefaults) -> tuple[SchedulerConfig, list[str]]:
    """sc with the defaults for what the user did not give; and what was applied."""
    update, applied = {}, []
    if "max_num_seqs" not in given:
        update["max_num_seqs"] = d.max_num_seqs
        applied.append(f"max_num_seqs={d.max_num_seqs}")
    chunks = issubclass(policy_class(sc.policy), ChunkedPrefillScheduler)
    if chunks and "max_num_batched_tokens" not in given:
        update["max_num_batched_tokens"] = d.max_num_batched_tokens
        applied.append(f"max_num_batched_tokens={d.max_num_batched_tokens}")
    return sc.model_copy(update=update), applied
