"""Per-GPU operator shapes (core/cost/operator_shapes.py) of what the GPU profiles were not
fitted on: mixture-of-experts layers, latent attention (MLA), sliding-window layers, and
layouts with pipeline stages, expert parallelism or data-parallel attention. The counts
follow core/cost/deployment.py (the roofline) through `Layout.share()`, so the two price
the same structure; the GEMMs are what engines run:
- MLA: a fused q_a + kv_a down-projection (vLLM's ReplicatedLinear: whole on every GPU),
  then q_b, kv_b and o split over TP; decodes attend absorbed, prefills applied;
- MoE layer: the router (replicated), the shared experts (split over TP) and the routed
  experts (ExpertShapes), whole on ep GPUs or sliced over TP;
- DP attention: whole attention weights on each GPU, which runs its own 1/tp of the
  sequences: the attention GEMMs' FLOPs per step token are 1/tp of a whole layer's."""
from __future__ import annotations

from math import ceil

from batchlab.core.cost.deployment import allreduces_per_step
from batchlab.core.cost.operator_shapes import ExpertShapes, Gemm, NO_EXPERTS, OperatorShapes
from batchlab.core.model.layout import Layout
from batchlab.core.model.spec import ModelSpec


def deployed_shapes(model: ModelSpec, layout: Layout) -> OperatorShapes:
    """One GPU of the busiest stage. ValueError (Layout.check's line) where it does not fit."""
    share = layout.share(model)
    tp, m = layout.tp, model
    h, b, act = m.hidden_size, m.dtype_bytes, m.activation_bytes
    layers = ceil(m.num_layers / layout.pp)
    moe_here = share.stage * m.moe_layers if m.is_moe else 0.0
    dense_here = share.stage * m.dense_layers if m.is_moe else 0.0
    # Attention on this GPU: each step token's share of it (DP attention: its own 1/tp of
    # the sequences, through whole weights), and the heads its weights hold.
    tokens_share = 1 / tp if layout.dp_attention else 1.0
    whole = layout.dp_attention or tp == 1

    def gemm(name: str, n_in: float, n_out: float, share_of_tokens: float = 1.0) -> Gemm:
        return Gemm(name, n_in * n_out * b, 2.0 * n_in * n_out * share_of_tokens)

    attention, rotary = _attention_gemms(m, tp, whole, tokens_share, gemm)
    inter = m.intermediate_size / tp
    dense_mlp = (gemm("gate_up", h, 2 * inter), gemm("down", inter, h))
    # Bytes each token's elementwise kernels read and write (as _dense): two norms and the
    # residual add on the full hidden state, rotary (and MLA's latent norms) on this GPU's
    # attention, the gated activation on its MLP or its routed experts' rows, and the sum
    # of a token's expert outputs.
    common = 2 * (2 * h) + 3 * h + rotary * tokens_share
    experts, moe_gemms, moe_act = NO_EXPERTS, (), 0.0
    if m.is_moe:
        k, e = m.experts_per_token, m.num_experts
        width = m.expert_intermediate_size * share.expert_slice
        experts = ExpertShapes(experts=share.experts_here, top_k=k, total=e,
                               expert_bytes=3 * h * width * m.expert_bytes_per_weight,
                               expert_flops_per_token=6.0 * h * width)
        routed = k * share.experts_here / e  # routed rows per step token on this GPU
        shared = m.shared_expert_intermediate_size / tp
        moe_gemms = (gemm("router", h, e),) + (
            (gemm("shared_gate_up", h, 2 * shared), gemm("shared_down", shared, h)) if shared else ())
        moe_act = 3 * width * routed + 3 * shared + (routed + 1) * h
    mlp_act = 3 * inter
    if m.is_moe:
        elementwise = common + (dense_here * mlp_act + moe_here * moe_act) / layers
        gemms, dense_gemms = attention, (dense_mlp if dense_here else ())
    else:
        elementwise, gemms, dense_gemms = common + mlp_act, attention + dense_mlp, ()
    a2a = 0.0
    if layout.ep > 1:  # k copies of each token, (ep - 1)/ep remote, each GPU sending 1/ep
        ep = layout.ep
        a2a = m.experts_per_token * h * act * (ep - 1) / ep / ep
    return OperatorShapes(
        layers=layers, tensor_parallel=tp, gemms=gemms,
        elementwise_bytes_per_token=elementwise * act,
        kv_bytes_per_token=m.kv_bytes_per_token_layer * share.kv_read,
        attn_flops_per_pair=m.attention_flops_per_pair_layer * share.attention_flops,
        allreduce_bytes_per_token=float(h * act),
        allreduces_per_layer=allreduces_per_step(m, layout) / layers,
        head=gemm("head", h, m.vocab_size / tp), dtype_bytes=b,
        experts=experts, window_layers=share.stage * m.windowed_layers, window_tokens=m.window,
        all_to_all_bytes_per_token=a2a,
        send_recv_bytes_per_token=h * act / share.sequence_groups if layout.pp > 1 else 0.0,
        dense_mlp_layers=dense_here, dense_mlp_gemms=dense_gemms, moe_layers=moe_here, moe_gemms=moe_gemms,
        prefill_attn_flops_per_pair=(m.prefill_attention_flops_per_pair_layer * share.attention_flops
                                     if m.is_mla else 0.0),
        stages=layout.pp, sequence_groups=share.sequence_groups, expert_parallel=layout.ep)


def _attention_gemms(m: ModelSpec, tp: int, whole: bool, tokens_share: float, gemm
                     ) -> tuple[tuple[Gemm, ...], float]:
    """(one layer's attention GEMMs on this GPU, its rotary and latent-norm elements per
    token). whole: this GPU holds every head (TP 1 or DP attention)."""
    h, hd, nh = m.hidden_size, m.head_dim, m.num_heads
    if not m.is_mla:
        shards = 1 if whole else min(tp, m.num_kv_heads)
        q_heads = nh if whole else nh // tp
        kv_heads = m.num_kv_heads // shards
        return ((gemm("qkv", h, (q_heads + 2 * kv_heads) * hd, tokens_share),
                 gemm("o", q_heads * hd, h, tokens_share)), 2 * (q_heads + kv_heads) * hd)
    heads = nh if whole else nh / tp
    rope, lora, ql = m.qk_rope_head_dim, m.kv_lora_rank, m.q_lora_rank
    v = m.v_head_dim or hd
    if ql:  # q_a and kv_a fused (vLLM's fused_qkv_a_proj), replicated over TP
        q = (gemm("qkv_a", h, ql + lora + rope, tokens_share), gemm("q_b", ql, heads * hd, tokens_share))
    else:
        q = (gemm("q", h, heads * hd, tokens_share), gemm("kv_a", h, lora + rope, tokens_share))
    gemms = q + (gemm("kv_b", lora, heads * (hd - rope + v), tokens_share),
                 gemm("o", heads * v, h, tokens_share))
    # rotary on the queries' and the shared key's rope parts; RMSNorms of the q and kv latents
    return gemms, 2 * (heads + 1) * rope + 2 * (ql + lora)
