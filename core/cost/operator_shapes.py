"""What ONE GPU of a deployment moves and computes per decoder layer, from the model's
shape alone (docs/cost-form.md section 2). The GPU cost form (core/cost/gpu_form.py) prices
these figures; the operator calibration (calibration/operators/) builds the same shapes
for the models Vidur timed, so a profile fitted on some models prices any other.

A dense model on TP alone keeps the shapes the profiles were fitted on (`dense`, the
operator calibration's). Anything else (mixture of experts, latent attention, sliding
windows, a layout with PP, EP or DP attention) is built by core/cost/deployment_shapes.py
from the model and `Layout.share()`, in core/cost/deployment.py's conventions: the busiest
stage's share of the layers, routed experts whole (EP) or sliced (TP), KV as the share
reads it. core/cost/dispatch.py `operator_shapes` picks one."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from batchlab.core.model.layout import kv_shards
from batchlab.core.model.spec import ModelSpec


class Gemm(NamedTuple):
    """One dense GEMM on one GPU: the weight bytes it streams once per step and the FLOPs
    each token through it costs."""
    name: str
    weight_bytes: float
    flops_per_token: float


class ExpertShapes(NamedTuple):
    """MoE experts on one GPU (issue 30): empty for dense models. One expert is a gated
    MLP (gate_up, then down: 2/3 and 1/3 of its weights and FLOPs), priced as the two
    grouped GEMMs engines run over the experts a step's tokens touch."""
    experts: float = 0  # routed experts per MoE layer on this GPU
    top_k: int = 0
    total: int = 0  # experts in the model
    expert_bytes: float = 0.0  # one expert's weights on this GPU (its slice under TP)
    expert_flops_per_token: float = 0.0  # one routed token through that slice


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
    # issue 30: MoE, MLA, sliding windows, expert and pipeline parallelism. Layers of a
    # MoE model differ: `gemms` (and the fields above) are what every layer runs;
    # dense_mlp_layers of them add dense_mlp_gemms, moe_layers add moe_gemms (router,
    # shared experts) and the routed experts. Counts are the busiest stage's share.
    experts: ExpertShapes = NO_EXPERTS
    window_layers: float = 0  # of `layers`, those that read at most window_tokens
    window_tokens: int = 0
    all_to_all_bytes_per_token: float = 0.0  # one EP dispatch (or combine) this GPU sends
    send_recv_bytes_per_token: float = 0.0  # one PP hop
    dense_mlp_layers: float = 0
    dense_mlp_gemms: tuple[Gemm, ...] = ()
    moe_layers: float = 0
    moe_gemms: tuple[Gemm, ...] = ()
    prefill_attn_flops_per_pair: float = 0.0  # MLA: a prefill pair's (projections applied)
    stages: int = 1  # PP
    sequence_groups: int = 1  # DP attention: GPUs whose attention runs its own sequences
    expert_parallel: int = 1

    @property
    def is_dense(self) -> bool:
        """The shapes the GPU profiles were fitted on: every layer alike, TP alone."""
        return not (self.moe_layers or self.dense_mlp_layers or self.window_layers or self.stages > 1
                    or self.sequence_groups > 1 or self.prefill_attn_flops_per_pair)

    @classmethod
    def dense(cls, model: ModelSpec, tensor_parallel: int) -> OperatorShapes:
        """A dense model's shapes at this TP degree (what the profiles were fitted on). A
        TP that does not split the heads evenly is a ValueError (kv_shards's message)."""
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
