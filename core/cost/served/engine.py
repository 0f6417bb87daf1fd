"""Facts of a served engine that shape a step's price, each from the engine's source.

vLLM V1 (vllm-project/vllm, vllm/config/compilation.py @ 002284d, the 0.11.2-0.12 line the
shared benchmarks ran):
  - cudagraph_mode FULL_AND_PIECEWISE by default: a decode-only batch replays a full CUDA
    graph; a prefill or mixed batch replays piecewise graphs with attention run outside
    them; a batch of more tokens than the largest capture size runs without graphs.
  - capture sizes [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16), max =
    min(2 x max_num_seqs, 512). A batch runs padded to the next capture size; a decode GEMM
    below the ridge reads the same weights padded or not, so the padding is not priced.
  - Inductor compiles the model with vLLM's custom ops off: norms, activations and
    residual adds run as fused Triton kernels.
vllm/distributed/device_communicators/custom_all_reduce.py @ 00d618a: the engine's own
all-reduce for 2, 4, 6 or 8 GPUs on one node that NVLink connects fully (or two GPUs), for
messages under 8 MiB; NCCL above."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineFacts:
    name: str
    source: str
    max_capture_cap: int  # the largest capture size is min(2 x max_num_seqs, this)
    custom_allreduce_max_bytes: int
    custom_allreduce_gpus: tuple[int, ...]

    def max_capture_tokens(self, max_num_seqs: int) -> int:
        return min(2 * max_num_seqs, self.max_capture_cap)

    def custom_allreduce(self, gpus: int, nvlink: bool) -> bool:
        """Whether the engine's own all-reduce serves `gpus` GPUs (below its size limit)."""
        return gpus in self.custom_allreduce_gpus and (nvlink or gpus == 2)


VLLM = EngineFacts(
    name="vLLM V1",
    source=("vllm-project/vllm @ 002284d vllm/config/compilation.py (FULL_AND_PIECEWISE graphs, capture "
            "sizes up to min(2 max_num_seqs, 512), fused Triton elementwise); @ 00d618a "
            "custom_all_reduce.py (own all-reduce below 8 MiB on 2/4/6/8 NVLink GPUs)"),
    max_capture_cap=512, custom_allreduce_max_bytes=8 * 1024 * 1024, custom_allreduce_gpus=(2, 4, 6, 8))
