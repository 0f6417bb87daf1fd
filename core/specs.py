"""Model architectures and accelerators, from their configs and datasheets.

Figures are the vendors' (dense, no sparsity; bf16/fp16 and, where the GPU has them,
fp8 tensor-core peak). What a real engine achieves is lower: the roofline cost model
scales them by efficiencies."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from batchlab.core.checks import Count, NonNegative, Positive, Seconds, Tokens, shown



class ModelSpec(BaseModel):
    """A Llama-family decoder (RMSNorm, RoPE, GQA, SwiGLU)."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    num_layers: Count
    hidden_size: Count
    num_heads: Count
    num_kv_heads: Count
    head_dim: Count
    intermediate_size: Count
    vocab_size: Count
    max_context: Tokens | None = Field(
        None, description="max_position_embeddings: longest prompt + output (None: unknown)")
    tied_embeddings: bool = False
    dtype_bytes: Count = Field(2, le=8, description="bytes per weight (and KV element, unless kv_dtype_bytes)")
    kv_dtype_bytes: Count | None = Field(None, le=8, description="bytes per KV element; None: dtype_bytes")

    @property
    def layer_params(self) -> int:
        h, hd = self.hidden_size, self.head_dim
        attn = h * self.num_heads * hd * 2 + h * self.num_kv_heads * hd * 2  # q, o, k, v
        return attn + 3 * h * self.intermediate_size + 2 * h  # SwiGLU + two norms

    @property
    def params(self) -> int:
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tied_embeddings else embed
        return self.num_layers * self.layer_params + embed + head + self.hidden_size

    @property
    def params_read_per_step(self) -> int:
        """Weights a forward pass streams: every layer and the LM head; the embedding
        table is only gathered row by row (unless tied, when it is the LM head)."""
        return self.num_layers * self.layer_params + self.vocab_size * self.hidden_size + self.hidden_size

    @property
    def weight_bytes(self) -> int:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        kv = self.kv_dtype_bytes or self.dtype_bytes
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * kv

    @property
    def activation_bytes(self) -> int:
        """Bytes per activation element (what a TP all-reduce moves): fp8 weights still
        compute and exchange activations in 16 bits."""
        return max(self.dtype_bytes, 2)

    @property
    def flops_per_token(self) -> int:
        """Matmul FLOPs of one token through all linear layers and the LM head."""
        return 2 * self.params_read_per_step

    @property
    def attention_flops_per_pair(self) -> int:
        """QK^T and PV for one (query, key) pair across all layers and heads."""
        return 4 * self.num_layers * self.num_heads * self.head_dim


class HardwareSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    memory_bytes: Positive
    mem_bandwidth: Positive = Field(description="bytes/s")
    peak_flops: Positive = Field(description="dense bf16/fp16 tensor-core FLOP/s")
    peak_flops_fp8: NonNegative = Field(0.0, description="dense fp8 tensor-core FLOP/s; 0 = no fp8")
    interconnect_bandwidth: NonNegative = Field(0.0, description="bytes/s per GPU for all-reduce; 0 = none")
    interconnect: str = Field("", description="what the all-reduces cross (NVLink, PCIe)")
    allreduce_latency_s: Seconds = Field(0.0, description="fixed cost of one all-reduce")

    def flops_for(self, dtype: str) -> float:
        """Dense tensor-core FLOP/s for weights in `dtype` (a DTYPES key)."""
        if dtype == "fp8":
            if not self.peak_flops_fp8:
                raise ValueError(f"hardware {self.name!r} has no fp8 tensor cores; use bf16 or fp16 "
                                 f"weights (fp8 is priced on {', '.join(fp8_hardware())})")
            return self.peak_flops_fp8
        return self.peak_flops


# Serving dtypes the roofline prices: bytes per element. float32 is the backend's CPU
# dtype (the embedded models); a GPU serves in 16 or 8 bits.
DTYPES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}
DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float8": "fp8",
                 "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "float32": "fp32"}


def canonical_dtype(name: str) -> str:
    """bf16 | fp16 | fp8 | fp32 from a dtype name as vLLM or torch spell it."""
    d = DTYPE_ALIASES.get(name.lower(), name.lower())
    if d not in DTYPES:
        raise ValueError(f"unknown dtype {shown(name)}; expected one of bf16, fp16, fp8 "
                         f"(or bfloat16, float16, float8)")
    return d


def with_dtypes(model: ModelSpec, weights: str, kv: str) -> ModelSpec:
    """The model served with weights and KV cache in these dtypes (DTYPES keys)."""
    return model.model_copy(update={"dtype_bytes": DTYPES[weights], "kv_dtype_bytes": DTYPES[kv]})


def fp8_hardware() -> list[str]:
    return [h.name for h in HARDWARE.values() if h.peak_flops_fp8]


def _llama(name, L, h, nh, nkv, inter, vocab, ctx, tied=False, hd=None) -> ModelSpec:
    return ModelSpec(name=name, num_layers=L, hidden_size=h, num_heads=nh, num_kv_heads=nkv,
                     head_dim=hd or h // nh, intermediate_size=inter, vocab_size=vocab,
                     max_context=ctx, tied_embeddings=tied)


MODELS: dict[str, ModelSpec] = {m.name: m for m in [
    _llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
    _llama("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
    _llama("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
    _llama("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
    _llama("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
    # Llama 3.1: the same shapes, RoPE scaled to a 128k context.
    _llama("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, 131072),
    _llama("llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256, 131072),
    _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 32768),
    _llama("qwen2.5-0.5b", 24, 896, 14, 2, 4864, 151936, 32768, tied=True),
    _llama("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, 32768),
    # The backend's embedded models (seeded random weights, float32 on CPU).
    _llama("batchlab-tiny", 6, 256, 8, 4, 768, 32000, 8192).model_copy(update={"dtype_bytes": 4}),
    _llama("batchlab-small", 12, 768, 12, 4, 2048, 32000, 8192).model_copy(update={"dtype_bytes": 4}),
]}

# Memory is what nvidia-smi reports as the total (MiB): datasheets round it, in GB
# or in GiB (an H200's "141 GB" is 140.4 GiB; an L4's "24 GB" is 22.5 GiB).
MIB = 2**20
# Interconnect: bytes/s one way per GPU (NVLink 3: 600 GB/s total, NVLink 4: 900; an L4
# has PCIe Gen4 x16, 32 GB/s). All-reduce latency: what one collective costs however
# small, 45 us, the low end of the 45-90 us of Vidur's profiled NCCL all-reduces on A100
# (a launch, a handshake, a sync); the same figure is assumed on every preset, PCIe
# included, for want of a measurement (--collective-latency-us sets it).
ALLREDUCE_LATENCY_S = 45e-6
HARDWARE: dict[str, HardwareSpec] = {h.name: h for h in [
    HardwareSpec(name="a100-80gb", memory_bytes=81_920 * MIB, mem_bandwidth=2.039e12,
                 peak_flops=312e12, interconnect_bandwidth=300e9, interconnect="NVLink 3",
                 allreduce_latency_s=ALLREDUCE_LATENCY_S),  # Ampere: no fp8 tensor cores
    HardwareSpec(name="h100-sxm", memory_bytes=81_559 * MIB, mem_bandwidth=3.35e12,
                 peak_flops=989e12, peak_flops_fp8=1979e12, interconnect_bandwidth=450e9,
                 interconnect="NVLink 4", allreduce_latency_s=ALLREDUCE_LATENCY_S),
    HardwareSpec(name="h200", memory_bytes=143_771 * MIB, mem_bandwidth=4.8e12,
                 peak_flops=989e12, peak_flops_fp8=1979e12, interconnect_bandwidth=450e9,
                 interconnect="NVLink 4", allreduce_latency_s=ALLREDUCE_LATENCY_S),
    # NVIDIA A40 datasheet (PCIe, Ampere GA102): 48 GB GDDR6 with ECC (nvidia-smi reports
    # 46,068 MiB with ECC on), 696 GB/s, 149.7 dense FP16/BF16 tensor TFLOP/s (299.4 with
    # sparsity), no fp8; NVLink bridges join pairs only, so TP beyond 2 crosses PCIe Gen4 x16.
    HardwareSpec(name="a40", memory_bytes=46_068 * MIB, mem_bandwidth=696e9,
                 peak_flops=149.7e12, interconnect_bandwidth=32e9, interconnect="PCIe 4",
                 allreduce_latency_s=ALLREDUCE_LATENCY_S),
    HardwareSpec(name="l4", memory_bytes=23_034 * MIB, mem_bandwidth=300e9,
                 peak_flops=121e12, peak_flops_fp8=242e12, interconnect_bandwidth=32e9,
                 interconnect="PCIe 4", allreduce_latency_s=ALLREDUCE_LATENCY_S),
]}


def lookup_model(name: str) -> ModelSpec:
    if name not in MODELS:
        raise ValueError(f"unknown model preset {shown(name)}; expected one of {', '.join(MODELS)}")
    return MODELS[name]


def lookup_hardware(name: str) -> HardwareSpec:
    if name not in HARDWARE:
        raise ValueError(f"unknown hardware preset {shown(name)}; expected one of {', '.join(HARDWARE)}")
    return HARDWARE[name]
