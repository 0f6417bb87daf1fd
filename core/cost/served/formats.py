"""The weight formats a served engine's GEMMs run in, and each format's rate term: how fast
that format's GEMMs run served, beside the bf16 GEMMs' served rate (terms.py
`bf16_gemm_speedup`), each with the prior it is held at where the benchmarks do not tell it.

The GPU form (core/cost/gpu_form.py) runs a GEMM at P = datasheet peak for its weights'
dtype x the efficiency fitted on 16-bit operator tables: fp8 weights at the fp8 peak,
mxfp4 experts (read at 4.25 bits) at the 16-bit peak. A rate of 1 keeps that: the
datasheet's ratio of the format's peak to bf16's is what the format gains served.

Which format a model's GEMMs are in (ModelSpec):
  bf16        weights of 2 bytes (or more)
  fp8_tensor  1-byte weights the config does not declare: vLLM's `--quantization fp8` on a
              16-bit checkpoint and the per-tensor fp8 checkpoints (nvidia/*-FP8, ModelOpt)
  fp8_block   1-byte weights the config declares `quant_method: fp8` (DeepSeek-V3/R1,
              Qwen3-*-FP8: `weight_block_size` [128, 128], one scale a 128 x 128 block)
  mxfp4       gpt-oss's routed experts (quant_method mxfp4); its other GEMMs are bf16
nvfp4 is not a format batchlab reads (config_json refuses ModelOpt's nvfp4 configs), so it
has no term: a knob that moved no price would mislead --sensitivity.

A model's routed experts run in the engine's fused-MoE kernel, not its dense GEMMs: their
compute at `moe_compute_share` (MOE_COMPUTE_SHARE) of the bf16 dense GEMMs' served rate,
times mxfp4's own rate for mxfp4 experts; fp8 per-tensor experts gain nothing over bf16 ones
there (the kernel tables below). Blockwise fp8 experts run DeepGEMM's grouped GEMMs instead
(DEEP_GEMM_EXPERTS), at the fp8_block GEMMs' rate."""
from __future__ import annotations

from dataclasses import dataclass

from batchlab.core.model.spec import ModelSpec

FORMATS = ("bf16", "fp8_tensor", "fp8_block", "mxfp4")


@dataclass(frozen=True, slots=True)
class WeightFormats:
    """The format of a model's dense GEMMs (attention, dense MLP, head, shared experts) and of
    its routed experts' grouped GEMMs (the dense one's for a model without experts)."""
    dense: str = "bf16"
    experts: str = "bf16"

    def __post_init__(self) -> None:
        for part in (self.dense, self.experts):
            if part not in FORMATS:
                raise ValueError(f"weight format {part!r}: expected one of {', '.join(FORMATS)}")

    @property
    def used(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.dense, self.experts)))


def weight_formats(model: ModelSpec) -> WeightFormats:
    if model.dtype_bytes >= 2:
        dense = "bf16"
    else:
        dense = "fp8_block" if model.quantization == "fp8" else "fp8_tensor"
    experts = "mxfp4" if model.quantization == "mxfp4" and model.expert_weight_bytes else dense
    return WeightFormats(dense, experts)


@dataclass(frozen=True, slots=True)
class Prior:
    """A served term the benchmarks may not tell, held at `prior` where they do not."""
    term: str  # the ServedTerms field
    base: str  # what the value is of
    prior: float  # held here where no benchmark row tells it
    low: float  # --sensitivity's range where held
    high: float
    source: str  # where the prior and its range come from


# bf16's rate is bf16_gemm_speedup itself (fitted on every 16-bit row): the others are
# ratios to it. mxfp4 on Hopper, vllm-project/vllm @ afdb4a4
# model_executor/layers/quantization/mxfp4.py get_mxfp4_backend: capability 9.0 runs
# FlashInfer's MXFP4 x BF16 MoE (VLLM_USE_FLASHINFER_MOE_MXFP4_BF16), else triton_kernels or
# Marlin; Mxfp4Config's activations are bf16 only: the weights are dequantised in the kernel.
RATES = {
    "fp8_tensor": Prior(
        "fp8_tensor_gemm_rate", "the datasheet fp8:bf16 ratio", 1.0, 0.5, 1.0,
        "the GPU's datasheet fp8:bf16 peak ratio, 2x on H100/H200; down to the bf16 rate"),
    "fp8_block": Prior(
        "fp8_block_gemm_rate", "the datasheet fp8:bf16 ratio", 1.0, 0.5, 1.0,
        "the datasheet fp8:bf16 peak ratio, as per-tensor; down to the bf16 rate (a scale a 128 x 128 "
        "block costing the kernel its fp8 gain)"),
    "mxfp4": Prior(
        "mxfp4_moe_rate", "the bf16 experts' rate", 1.0, 0.5, 2.0,
        "the bf16 experts' rate: vLLM @ afdb4a4 dequantises mxfp4 to bf16 in its Hopper MoE kernels; up to 2x "
        "with Blackwell's fp4 tensor cores"),
}
RATE_TERMS = tuple(r.term for r in RATES.values())

# Held, never fitted: vLLM's fused-MoE kernel benchmark (benchmarks/kernels/benchmark_moe.py:
# the routed experts of one layer, top-k to the final sum, replayed from a CUDA graph) on
# models of many small experts, at 1024-4096 tokens, where the kernel computes: Qwen3-30B-A3B
# fp8 w8a8 on an H100 (vllm-project/vllm PR #24700, the defaults then) at 0.25-0.30 of the
# H100 profile's bf16 dense served rate, a Gemma-4 MoE in bf16 on an H200 (PR #44818, tuned)
# at 0.39-0.54: 0.34 their median. Mixtral-8x7B's eight large experts (PR #24700, tuned) reach
# 0.82, the range's top. fp8 experts gain little over bf16 ones: 10-17% at batch 4 and more,
# both tuned (PR #35457, H200), and the H100 fp8 table runs below the bf16 ones above.
# No Blackwell table (FlashInfer's or CUTLASS's MoE kernels there) was found at these sizes:
# a B200 price carries Hopper's share, and --sensitivity's top is the nearest to them.
MOE_COMPUTE_SHARE = Prior(
    "moe_compute_share", "of the bf16 dense GEMMs' served rate", 0.34, 0.25, 0.83,
    "vLLM's fused-MoE kernel at 1024-4096 tokens: Qwen3-30B-A3B fp8 on H100 0.25-0.30 (vllm-project/vllm "
    "PR #24700), a Gemma-4 MoE bf16 on H200 0.39-0.54 (PR #44818), their median 0.34; up to Mixtral-8x7B's "
    "large experts, 0.82")

# vLLM's Fp8MoEMethod runs blockwise fp8 experts through TritonOrDeepGemmExperts, DeepGEMM's
# grouped GEMMs where DeepGEMM is installed (vllm/envs.py of the 0.12 line: VLLM_USE_DEEP_GEMM
# and VLLM_MOE_USE_DEEP_GEMM on by default), as the vllm/vllm-openai image has it (its build
# runs tools/install_deepgemm.sh); DeepGEMM's grouped GEMMs run near its dense ones, so those
# experts keep the fp8_block rate, not the Triton tables' share.
DEEP_GEMM_EXPERTS = ("fp8_block",)

BF16_TERM = "bf16_gemm_speedup"  # held at BF16_PRIOR (the eager tables' rate) where no row runs bf16
BF16_PRIOR = 1.0


def rate_of(terms: object, fmt: str) -> float:
    """The rate of `fmt` among `terms` (a ServedTerms): 1 for bf16, whose speed-up is the base."""
    return 1.0 if fmt == "bf16" else float(getattr(terms, RATES[fmt].term))


def terms_told(formats: list[WeightFormats]) -> set[str]:
    """The rate terms (bf16's speed-up among them) of formats some of these rows' GEMMs run
    in: those a fit on them can tell."""
    return {RATES[f].term if f in RATES else BF16_TERM for w in formats for f in w.used}

