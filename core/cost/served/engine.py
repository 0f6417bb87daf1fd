"""Facts of a served engine that shape a step's price, each from the engine's source.

vLLM V1 (vllm-project/vllm, vllm/config/compilation.py @ 002284d, the 0.11.2-0.12 line the
shared benchmarks ran):
  - cudagraph_mode FULL_AND_PIECEWISE by default: a decode-only batch replays a full CUDA
    graph; a prefill or mixed batch replays piecewise graphs with attention run outside
    them; a batch of more tokens than the largest capture size runs without graphs.
  - capture sizes [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16), max =
    min(2 x max_num_seqs, 512). A batch runs padded to the next capture size; a decode GEMM
    below the ridge reads the same weights padded or not, so the padding is not priced.
    With speculative decoding a decode runs 1 + k tokens and max = min(2 x max_num_seqs x
    (1 + k), 512) (vllm/config/vllm.py _set_cudagraph_sizes @ 09f030e: decode_query_len).
  - Inductor compiles the model with vLLM's custom ops off: norms, activations and
    residual adds run as fused Triton kernels.
The tensor-parallel all-reduce (vllm/distributed/device_communicators/cuda_communicator.py,
custom_all_reduce.py, symm_mem.py and all_reduce_utils.py @ 00d618a) takes the first of:
  1. the engine's own (custom) all-reduce, on 2, 4, 6 or 8 GPUs of one node that NVLink
     connects fully (or two GPUs), for messages under 8 MiB, or under
     CUSTOM_ALL_REDUCE_MAX_SIZES where torch symmetric memory serves the GPU (Hopper:
     8 MiB at 2 and 4 GPUs, 512 KiB at 6, 256 KiB at 8);
  2. torch symmetric memory (VLLM_ALLREDUCE_USE_SYMM_MEM, on by default) under
     SYMM_MEM_ALL_REDUCE_MAX_SIZES (Hopper: 64 MiB at 2, 6 and 8 GPUs, 32 MiB at 4): a
     multimem (NVLink SHARP) all-reduce at 4, 6 and 8 GPUs (Blackwell: 6 and 8), a two-shot
     one otherwise;
  3. NCCL (the measured table)."""
from __future__ import annotations

from dataclasses import dataclass, field

MIB = 1024 * 1024


@dataclass(frozen=True)
class EngineFacts:
    name: str
    source: str
    max_capture_cap: int  # the largest capture size is min(2 x max_num_seqs, this)
    custom_allreduce_max_bytes: int
    custom_allreduce_gpus: tuple[int, ...]
    # GPU architecture by catalogue name: the size tables below are per architecture
    architecture: dict[str, str] = field(default_factory=dict)
    custom_max_with_symm: dict[str, dict[int, int]] = field(default_factory=dict)
    symm_mem_max: dict[str, dict[int, int]] = field(default_factory=dict)
    multimem_gpus: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def max_capture_tokens(self, max_num_seqs: int, decode_query_len: int = 1) -> int:
        """decode_query_len: tokens a decode runs (1 + k drafts with speculation)."""
        return min(2 * max_num_seqs * decode_query_len, self.max_capture_cap)

    def custom_allreduce(self, gpus: int, nvlink: bool) -> bool:
        """Whether the engine's own all-reduce serves `gpus` GPUs (below its size limit)."""
        return gpus in self.custom_allreduce_gpus and (nvlink or gpus == 2)

    def allreduce_paths(self, gpu: str, gpus: int, nvlink: bool) -> AllReducePaths:
        """The engine's all-reduce paths for `gpus` GPUs of catalogue GPU `gpu`."""
        arch = self.architecture.get(gpu, "")
        symm = self.symm_mem_max.get(arch, {}).get(gpus, 0) if nvlink else 0
        custom = 0
        if self.custom_allreduce(gpus, nvlink):
            custom = self.custom_allreduce_max_bytes
            if symm:
                custom = min(custom, self.custom_max_with_symm[arch].get(gpus, custom))
        return AllReducePaths(custom, symm, gpus in self.multimem_gpus.get(arch, ()))


@dataclass(frozen=True, slots=True)
class AllReducePaths:
    custom_below: int  # bytes: the engine's own all-reduce below this (0: never)
    symm_below: int  # bytes: torch symmetric memory from custom_below to this (0: never)
    multimem: bool  # symmetric memory by NVLink SHARP (else two-shot)


HOPPER = ("h100-sxm", "h100-pcie", "h200", "h20")
VLLM = EngineFacts(
    name="vLLM V1",
    source=("vllm-project/vllm @ 002284d vllm/config/compilation.py (FULL_AND_PIECEWISE graphs, capture "
            "sizes up to min(2 max_num_seqs, 512), fused Triton elementwise); @ 00d618a "
            "cuda_communicator.py, custom_all_reduce.py, all_reduce_utils.py (own all-reduce below 8 MiB on "
            "2/4/6/8 NVLink GPUs, Hopper with symmetric memory 8 MiB/8 MiB/512 KiB/256 KiB; torch symmetric "
            "memory, multimem at 4/6/8 GPUs, up to 64/32/64/64 MiB; NCCL above)"),
    max_capture_cap=512, custom_allreduce_max_bytes=8 * MIB, custom_allreduce_gpus=(2, 4, 6, 8),
    architecture={**{g: "9.0" for g in HOPPER}, "b200": "10.0"},
    custom_max_with_symm={"9.0": {2: 64 * MIB, 4: 32 * MIB, 6: MIB // 2, 8: MIB // 4},
                          "10.0": {2: 2 * MIB, 4: 2 * MIB, 6: MIB, 8: MIB}},
    symm_mem_max={"9.0": {2: 64 * MIB, 4: 32 * MIB, 6: 64 * MIB, 8: 64 * MIB},
                  "10.0": {2: 8 * MIB, 4: 32 * MIB, 6: 128 * MIB, 8: 128 * MIB}},
    multimem_gpus={"9.0": (4, 6, 8), "10.0": (6, 8)})
