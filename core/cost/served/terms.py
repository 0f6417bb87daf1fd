"""The served-engine constants, fitted on served benchmarks (calibration/served_bench/fit.py),
and what they do to a GPU profile's constants (core/cost/gpu_form.py GpuCostParams).

A decode step replayed from a CUDA graph keeps `graph_fixed_share` of each eager kernel's
fixed cost (the launch gap goes, the kernel's own tail stays; held at 1, GRAPH_FIXED_SHARE:
the tables hold no launch gap); a piecewise graph does the same outside attention. Fused elementwise kernels move `elementwise_share` of the eager
kernels' bytes. The served attention kernel runs `attention_speedup` times the eager
table's pair and KV rates, and a prefill chunk's own causal pairs cost what a cached
key's do (FlashAttention skips the masked blocks). bf16 GEMMs run `bf16_gemm_speedup` times
the eager rate on their compute side; a GEMM in another weight format runs that times its
format's rate (formats.py: fp8 per-tensor, fp8 blockwise, mxfp4 MoE, each with its prior);
routed experts compute at `moe_compute_share` of the bf16 rate (the fused-MoE kernel,
formats.py MOE_COMPUTE_SHARE). `step_s` and `seq_s` are the engine's own time a step
and a sequence. A symmetric-memory all-reduce moves its bytes at `symm_mem_efficiency` of
the link's one-way bandwidth (held at vLLM's published H100 figure, SYMM_MEM_EFFICIENCY). `host_overlap` of the host time is hidden behind the GPU's
step (async scheduling, host.py). No efficiency passes 1: the datasheet is a ceiling."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from batchlab.core.cost.gpu_form import GpuCostParams
from batchlab.core.cost.served.formats import DEEP_GEMM_EXPERTS, MOE_COMPUTE_SHARE, RATES, Prior, rate_of
from batchlab.core.cost.served.host import HOST_OVERLAP

# What each constant may be, physically: a share of a cost in (0, 1], a speed-up of the
# eager tables' rates at least 1/2 (no served kernel is much slower than its eager self)
# and at most the datasheet (applied capped), host time under 10 ms a step.
BOUNDS = {"graph_fixed_share": (0.02, 1.0), "custom_allreduce_scale": (0.02, 1.0),
          "symm_mem_efficiency": (0.1, 1.0),
          "attention_speedup": (0.5, 4.0), "elementwise_share": (0.05, 1.0), "bf16_gemm_speedup": (0.5, 2.0),
          "step_s": (1e-5, 10e-3), "seq_s": (0.0, 100e-6),
          # a format's rate beside bf16's: a quarter (a kernel far off its format's peak) to twice
          "fp8_tensor_gemm_rate": (0.25, 2.0), "fp8_block_gemm_rate": (0.25, 2.0), "mxfp4_moe_rate": (0.25, 2.0),
          "moe_compute_share": (0.1, 1.0), "host_overlap": (0.0, 1.0)}


@dataclass(frozen=True)
class ServedTerms:
    graph_fixed_share: float
    custom_allreduce_scale: float
    symm_mem_efficiency: float
    attention_speedup: float
    elementwise_share: float
    bf16_gemm_speedup: float
    step_s: float
    seq_s: float
    # formats.py RATES: held at these priors where no row runs the format
    fp8_tensor_gemm_rate: float = 1.0
    fp8_block_gemm_rate: float = 1.0
    mxfp4_moe_rate: float = 1.0
    moe_compute_share: float = MOE_COMPUTE_SHARE.prior  # held (formats.py)
    host_overlap: float = 0.0  # host.py: async scheduling's share of the host time hidden

    def __post_init__(self) -> None:
        for name, (lo, hi) in BOUNDS.items():
            v = getattr(self, name)
            if not lo <= v <= hi:
                raise ValueError(f"served term {name} = {v!r}: expected {lo:g} to {hi:g}")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def gemm_efficiency(self, p: GpuCostParams, fmt: str) -> float:
        """The compute efficiency of a GEMM in weight format `fmt` (formats.py), served."""
        return min(1.0, p.compute_efficiency * self.bf16_gemm_speedup * rate_of(self, fmt))

    def expert_efficiency(self, p: GpuCostParams, fmt: str, bf16_peak_share: float) -> float:
        """The compute efficiency of routed experts in format `fmt` (of the peak the form runs
        at, bf16_peak_share of which is the bf16 peak): the fused-MoE kernel's share of the
        bf16 rate, mxfp4 experts at their own rate on top; DeepGEMM's at their format's
        dense rate (formats.py)."""
        if fmt in DEEP_GEMM_EXPERTS:
            return self.gemm_efficiency(p, fmt)
        rate = self.mxfp4_moe_rate if fmt == "mxfp4" else 1.0
        return min(1.0, p.compute_efficiency * self.bf16_gemm_speedup * self.moe_compute_share * rate
                   * bf16_peak_share)

    def params(self, p: GpuCostParams, graphs: str, fmt: str = "bf16") -> GpuCostParams:
        """p as the engine runs a step: graphs "full" (a decode batch), "piecewise"
        (attention outside the graph) or "none"; fmt: the dense GEMMs' weight format."""
        share = self.graph_fixed_share if graphs != "none" else 1.0
        attn_share = self.graph_fixed_share if graphs == "full" else 1.0
        return dataclasses.replace(
            p, gemm_fixed_s=p.gemm_fixed_s * share, layer_fixed_s=p.layer_fixed_s * share,
            attn_layer_s=p.attn_layer_s * attn_share, attn_seq_s=p.attn_seq_s * attn_share,
            elementwise_efficiency=min(1.0, p.elementwise_efficiency / self.elementwise_share),
            elementwise_row_efficiency=min(1.0, p.elementwise_row_efficiency / self.elementwise_share),
            attn_kv_efficiency=min(1.0, p.attn_kv_efficiency * self.attention_speedup),
            attn_pair_efficiency=min(1.0, p.attn_pair_efficiency * self.attention_speedup),
            attn_self_pair_cost=1.0, compute_efficiency=self.gemm_efficiency(p, fmt),
            step_s=self.step_s, seq_s=self.seq_s)


# Held, never fitted: the GPU profiles' fixed costs come from operator tables that time the
# kernels alone, on the GPU (Vidur's profilers; the launch gaps between kernels are not in
# them), so a CUDA graph, which removes launch gaps, has none of them to remove. Fitted, the
# term went to 1 on all rows and to its other bound (0.02) without gpt-oss-120b, pricing that
# model's small decodes 46% fast (docs/results/2026-12-07-served-engine.md).
GRAPH_FIXED_SHARE = Prior(
    "graph_fixed_share", "of each eager kernel's fixed cost", 1.0, 0.02, 1.0,
    "1: the operator tables time kernels alone (microsoft/vidur @ e26eb8f vidur/profiling/common/cuda_timer.py, "
    "its profilers' default --profile_method record_function: CUDA kernel time), no launch gap for a graph to "
    "remove; down to 0.02, a graph that also shortened the kernels' own floors")

# Held, never fitted: vLLM's own communicator benchmark on H100 (benchmarks/kernels/
# benchmark_device_communicators.py) timed torch's multimem all-reduce at 0.5-48 MiB: at 4 and
# 6 GPUs (vllm-project/vllm PR #24111, 0.5-4 MB) and at 8 (PR #42324, SM 9.0) each added MiB
# costs 4.6-5.1 us, 204-225 GB/s, where its fixed part is 9-14 us; the H100 profile's link
# moves 365 GB/s one way, so 0.59 of it. Fitted, the term went to its bound 1 on all rows and
# to 0.23 without Llama-3.1-8B, a 32 MiB all-reduce at 8 GPUs 2.5x the published time.
# Blackwell's multimem moves a smaller share of its faster link (B300: 0.31), so a B200
# price carries H100's share: --sensitivity's low end is Blackwell's.
SYMM_MEM_EFFICIENCY = Prior(
    "symm_mem_efficiency", "of the link's one-way bandwidth", 0.59, 0.3, 0.75,
    "0.59: vLLM's device-communicator benchmark on H100, multimem at 4, 6 and 8 GPUs, 204-225 GB/s an "
    "added byte (vllm-project/vllm PR #24111, #42324) of the profile's 365 GB/s; down to 0.3, Blackwell's "
    "(B300 at 8 GPUs, PR #37756: 283 of 900 GB/s), up to 0.75 for the two-shot path at 2 GPUs, not published")

# The terms held at a stated prior where the rows do not tell them (the fit says which).
PRIORS: dict[str, Prior] = {p.term: p for p in (*RATES.values(), HOST_OVERLAP, GRAPH_FIXED_SHARE,
                                                 SYMM_MEM_EFFICIENCY, MOE_COMPUTE_SHARE)}
