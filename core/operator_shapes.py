"""What ONE GPU of a deployment moves and computes per decoder layer, from the model's
shape alone (docs/cost-form.md section 2). The GPU cost form (core/gpu_cost.py) prices
these figures; the operator calibration (calibration/operators/) builds the same shapes
for the models Vidur timed, so a profile fitted on some models prices any other.

Dense Llama-family models here (RMSNorm, RoPE, GQA, SwiGLU); the MoE, MLA, sliding-window
and pipeline/expert-parallel fields are present and empty (issue 30 fills them)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from batchlab.core.cost import kv_shards
from batchlab.core.specs import ModelSpec


class Gemm(NamedTuple):
    """One dense GEMM on one GPU: the weight bytes it streams once per step and the FLOPs
    each token through it costs."""
    name: str
    weight_bytes: float
    flops_per_token: float


class ExpertShapes(NamedTuple):
    """MoE experts on one GPU (issue 30): empty for dense models."""
    experts: int = 0  # on this GPU
    top_k: int = 0
    total: int = 0  # experts in the model
    expert_bytes: float = 0.0
    expert_flops_per_token: float = 0.0


NO_EXPERTS = ExpertShapes()


@dataclass(frozen=True, slots=True)
class OperatorShapes:
    layers: int  # decoder layers on this GPU (a pipeline stage's share under PP)
    tensor_parallel: int
    gemms: tuple[Gemm, ...]  # one layer's dense GEMMs, sharded by TP
    elementwise_bytes_per_token: float  # norms, rotary, activation, residual add
    kv_bytes_per_token: float  # one layer's KV on this GPU
    attn_flops_per_pair: float  # one layer's QK^T + PV per (query, key) pair on this GPU
    allreduce_bytes_per_token: float  # one all-reduce's message per token (the full hidden state)
    allreduces_per_layer: int  # 2 under TP (after attention, after the MLP), else 0
    head: Gemm  # the LM head, priced per sampled row
    dtype_bytes: int = 2  # weights
    # issue 30: MoE, sliding windows, expert and pipeline parallelism
    experts: ExpertShapes = NO_EXPERTS
    window_layers: int = 0
    window_tokens: int = 0
    all_to_all_bytes_per_token: float = 0.0
    send_recv_bytes_per_token: float = 0.0

    @classmethod
    def of(cls, model: ModelSpec, tensor_parallel: int = 1) -> OperatorShapes:
        """model's per-GPU shapes at this TP degree. A TP that does not split the heads
        evenly is a ValueError (kv_shards's message)."""
        tp = tensor_parallel
        shards = kv_shards(model, tp)
        h, hd, b = model.hidden_size, model.head_dim, model.dtype_bytes
        q_heads = model.num_heads // tp
        kv_heads = model.num_kv_heads // shards  # a replica of one KV head where tp exceeds them
        inter = model.intermediate_size / tp

        def gemm(name: str, n_in: float, n_out: float) -> Gemm:
            return Gemm(name, n_in * n_out * b, 2.0 * n_in * n_out)

        gemms = (gemm("qkv", h, (q_heads + 2 * kv_heads) * hd),
                 gemm("o", q_heads * hd, h),
                 gemm("gate_up", h, 2 * inter),
                 gemm("down", inter, h))
        act = model.activation_bytes
        # Bytes each token's elementwise kernels read and write: two RMSNorms and the
        # residual add act on the full hidden state (they do not shrink with TP); rotary on
        # this GPU's q and k heads; SwiGLU reads gate and up and writes their product.
        norms = 2 * (2 * h)
        residual = 3 * h
        rotary = 2 * (q_heads + kv_heads) * hd
        swiglu = 3 * inter
        kv_b = model.kv_dtype_bytes or model.dtype_bytes
        return cls(
            layers=model.num_layers,
            tensor_parallel=tp,
            gemms=gemms,
            elementwise_bytes_per_token=(norms + residual + rotary + swiglu) * act,
            kv_bytes_per_token=2.0 * kv_heads * hd * kv_b,
            attn_flops_per_pair=4.0 * q_heads * hd,
            allreduce_bytes_per_token=float(h * act),
            allreduces_per_layer=2 if tp > 1 else 0,
            head=gemm("head", h, model.vocab_size / tp),
            dtype_bytes=b,
        )

    @property
    def weight_bytes_per_layer(self) -> float:
        return sum(g.weight_bytes for g in self.gemms)

    @property
    def flops_per_token_per_layer(self) -> float:
        return sum(g.flops_per_token for g in self.gemms)
