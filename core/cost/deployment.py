"""The roofline of a model as deployed: mixture-of-experts weights read by the experts a
step touches, latent (MLA) and sliding-window attention, and a layout (core/model/layout.py)
with pipeline stages, expert parallelism and data-parallel attention. A dense model on
TP alone keeps the plain RooflineCostModel (core/cost/roofline.py), whose prices do not
move; core/cost/dispatch.py picks between the two.

One GPU of the busiest stage is priced; a step is a round of the pipeline:

    step = overhead + pp * stage(micro-batch) + (pp - 1) * send/recv(micro-batch)
    stage = max(bytes / bandwidth, FLOPs / peak) + TP all-reduces + EP all-to-alls

- the step's sequences run as m = min(pp, num_seqs) micro-batches of 1/m of its tokens,
  KV reads and pairs, as engines keep pp batches in flight (vLLM's virtual engines): each
  sequence advances once per pp stage slots; with fewer sequences than stages some
  slots idle (the bubble: the same round for fewer tokens).
- bytes: the weights every token reads (attention, dense MLPs, shared experts, router,
  LM head) + the routed experts the micro-batch's T tokens are expected to touch,
  E_gpu * (1 - (1 - k/E)^T) per MoE layer (uniform routing) + KV: full-attention layers
  read every cached token, windowed layers at most their window (the windowed features).
- FLOPs: the active parameters (k experts per token) and attention pairs (MLA: decodes'
  with the projections absorbed, prefill chunks' with them applied, as engines run them).
- all-to-all (EP): dispatch and combine of each token's hidden state to its k experts,
  (ep - 1)/ep of them remote, each GPU sending its 1/ep of the tokens; latency as an
  all-reduce's. send/recv (PP): the micro-batch's hidden states across each boundary."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.core.cost.form import SHORT_STEPS, FormDefaults, window_stretch_times
from batchlab.core.features import StepFeatures
from batchlab.core.model.hardware import HardwareSpec
from batchlab.core.model.layout import Layout
from batchlab.core.model.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class DeploymentRoofline(FormDefaults):
    weight_bytes: float  # read every step: everything but the routed experts (per GPU)
    expert_bytes: float  # one routed expert over the stage's MoE layers (this GPU's slice)
    experts_here: float  # routed experts per MoE layer on this GPU
    touch: float  # k / E: the chance a token routes to a given expert
    kv_bytes_per_token: float  # full-attention layers
    window_kv_bytes_per_token: float  # windowed layers
    flops_per_token: float
    attention_flops_per_pair: float  # full-attention layers
    window_attention_flops_per_pair: float
    mem_bandwidth: float
    peak_flops: float
    overhead_s: float = 0.0
    comm_bytes_per_token: float = 0.0  # TP all-reduces
    comm_latency_s: float = 0.0
    a2a_bytes_per_token: float = 0.0  # EP dispatch + combine
    a2a_latency_s: float = 0.0
    comm_bandwidth: float = 1.0
    stages: int = 1
    hop_bytes_per_token: float = 0.0  # PP send/recv per boundary
    hop_latency_s: float = 0.0
    window: int = 0  # the model's sliding window (the simulator's windowed features)
    # A prefill pair's FLOPs less a decode pair's (MLA: applied vs absorbed projections).
    prefill_attention_extra_flops: float = 0.0

    def _price(self, seqs, tokens, kv, pairs, w_kv, w_pairs, p_pairs=0):
        """Works on numbers and on numpy arrays alike (decode_run_times)."""
        m = min(self.stages, seqs) if self.stages > 1 else 1
        t = tokens / m
        mem = self.weight_bytes + (self.kv_bytes_per_token * kv + self.window_kv_bytes_per_token * w_kv) / m
        if self.experts_here:
            mem = mem + self.expert_bytes * self.experts_here * (1 - (1 - self.touch) ** t)
        flops = self.flops_per_token * t + (self.attention_flops_per_pair * pairs
                                            + self.window_attention_flops_per_pair * w_pairs) / m
        if self.prefill_attention_extra_flops:
            flops = flops + self.prefill_attention_extra_flops * p_pairs / m
        stage = np.maximum(mem / self.mem_bandwidth, flops / self.peak_flops)
        if self.comm_bytes_per_token:
            stage = stage + self.comm_latency_s + self.comm_bytes_per_token * t / self.comm_bandwidth
        if self.a2a_bytes_per_token:
            stage = stage + self.a2a_latency_s + self.a2a_bytes_per_token * t / self.comm_bandwidth
        step = self.stages * stage
        if self.stages > 1:
            step = step + (self.stages - 1) * (self.hop_latency_s + self.hop_bytes_per_token * t
                                               / self.comm_bandwidth)
        return self.overhead_s + step

    def step_time(self, f: StepFeatures) -> float:
        return float(self._price(f.num_seqs, f.prefill_tokens + f.decode_tokens, f.kv_tokens_read,
                                 f.attention_pairs, f.window_kv_tokens_read, f.window_attention_pairs,
                                 f.prefill_attention_pairs))

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        """m steady decode steps: every KV read and pair count grows by num_seqs a step,
        the windowed ones up to num_seqs * window (exact for a window-free model, and for
        a windowed one whose sequences are all inside, or all past, the window; the
        simulator prices a windowed model's runs by window_decode_times)."""
        grow = np.arange(m, dtype=np.int64) * f.num_seqs
        w_kv, w_pairs = f.window_kv_tokens_read + grow, f.window_attention_pairs + grow
        if self.window:
            cap = f.num_seqs * self.window
            w_kv, w_pairs = np.minimum(w_kv, max(cap, f.window_kv_tokens_read)), \
                np.minimum(w_pairs, max(cap, f.window_attention_pairs))
        tokens = f.prefill_tokens + f.decode_tokens
        t = self._price(f.num_seqs, tokens, f.kv_tokens_read + grow, f.attention_pairs + grow, w_kv, w_pairs,
                        f.prefill_attention_pairs)
        return np.broadcast_to(t, (m,)).astype(float)

    def window_decode_times(self, n: int, kv0: int, w0: int, u: int, m: int) -> list[float]:
        """Decode steps with windowed reads w0, w0 + u, ...: step_time's arithmetic on
        arrays (short stretches step by step)."""
        if m < SHORT_STEPS:
            return window_stretch_times(self, n, kv0, w0, u, m)
        steps = np.arange(m, dtype=np.int64)
        kv, w = kv0 + steps * n, w0 + steps * u
        return np.broadcast_to(self._price(n, n, kv, kv, w, w, 0), (m,)).astype(float).tolist()


def allreduces_per_step(model: ModelSpec, layout: Layout) -> float:
    """TP all-reduces one GPU of the busiest stage runs a step: Megatron's one after
    attention (none with DP attention) and one after each dense MLP and each MoE layer
    whose experts are sliced over TP (spread experts combine by the all-to-all)."""
    if layout.tp == 1:
        return 0.0
    stage = layout.share(model).stage
    moe = model.moe_layers if model.is_moe else 0
    return stage * ((0 if layout.dp_attention else model.num_layers) + model.dense_layers
                    + (moe if layout.ep == 1 else 0))


def deployment_roofline(model: ModelSpec, hw: HardwareSpec, layout: Layout,
                        mem_efficiency: float = 1.0, compute_efficiency: float = 1.0,
                        overhead_s: float = 0.0, allreduce_latency_s: float | None = None,
                        peak: float | None = None) -> DeploymentRoofline:
    """peak: the tensor-core FLOP/s the weights' dtype runs at (core/cost/dispatch.py picks it)."""
    share = layout.share(model)
    tp, stage = layout.tp, share.stage
    L, h, wbytes = model.num_layers, model.hidden_size, model.dtype_bytes
    peak = peak or hw.peak_flops
    head = model.vocab_size * h
    attention = L * model.attention_params
    other = model.non_expert_params - attention  # dense MLPs, shared experts, router, norms
    weights = (stage * (attention * share.attention_weights + other * share.dense_weights)
               + head * share.dense_weights) * wbytes
    expert = model.expert_params * model.expert_bytes_per_weight * share.expert_slice
    moe_layers = stage * model.moe_layers if model.is_moe else 0.0
    kv_layer = model.kv_bytes_per_token_layer * share.kv_read
    # Attention runs at the 16-bit peak whatever the weights: scaled to the one peak used.
    attn_layer = model.attention_flops_per_pair_layer * share.attention_flops * peak / hw.peak_flops
    prefill_extra = ((model.prefill_attention_flops_per_pair_layer - model.attention_flops_per_pair_layer)
                     * share.attention_flops * peak / hw.peak_flops)
    windowed = model.windowed_layers
    act = model.activation_bytes
    latency = hw.allreduce_latency_s if allreduce_latency_s is None else allreduce_latency_s
    comm_bytes = comm_latency = a2a_bytes = a2a_latency = 0.0
    if tp > 1:
        if hw.interconnect_bandwidth <= 0:
            raise ValueError(f"hardware {hw.name!r} has no interconnect_bandwidth for {layout.describe()}")
        per_layer = allreduces_per_step(model, layout)
        comm_bytes = per_layer * h * act * 2 * (tp - 1) / tp
        comm_latency = per_layer * latency
        if layout.ep > 1:
            ep = layout.ep
            a2a_bytes = moe_layers * 2 * model.experts_per_token * h * act * (ep - 1) / ep / ep
            a2a_latency = moe_layers * 2 * latency
    hop_bytes = hop_latency = 0.0
    if layout.pp > 1:
        if hw.interconnect_bandwidth <= 0:
            raise ValueError(f"hardware {hw.name!r} has no interconnect_bandwidth for {layout.describe()}")
        hop_bytes, hop_latency = h * act / share.sequence_groups, latency
    return DeploymentRoofline(
        weight_bytes=weights, expert_bytes=expert * moe_layers, experts_here=share.experts_here if moe_layers else 0.0,
        touch=model.experts_per_token / model.num_experts if model.is_moe else 0.0,
        kv_bytes_per_token=stage * (L - windowed) * kv_layer, window_kv_bytes_per_token=stage * windowed * kv_layer,
        flops_per_token=2 * (stage * (model.active_params - head) + head) / tp,
        attention_flops_per_pair=stage * (L - windowed) * attn_layer,
        window_attention_flops_per_pair=stage * windowed * attn_layer,
        mem_bandwidth=hw.mem_bandwidth * mem_efficiency, peak_flops=peak * compute_efficiency,
        overhead_s=overhead_s, comm_bytes_per_token=comm_bytes, comm_latency_s=comm_latency,
        a2a_bytes_per_token=a2a_bytes, a2a_latency_s=a2a_latency,
        comm_bandwidth=hw.interconnect_bandwidth or 1.0, stages=layout.pp,
        hop_bytes_per_token=hop_bytes, hop_latency_s=hop_latency, window=model.window,
        prefill_attention_extra_flops=stage * model.num_layers * prefill_extra)


def held_weight_bytes(model: ModelSpec, layout: Layout) -> float:
    """Weights one GPU of the busiest stage holds: its slice of every layer of the stage,
    its experts, and its share of the embedding and LM head."""
    share = layout.share(model)
    h, stage = model.hidden_size, share.stage
    attention = model.num_layers * model.attention_params
    other = model.non_expert_params - attention
    tables = (1 if model.tied_embeddings else 2) * model.vocab_size * h
    dense = (stage * (attention * share.attention_weights + other * share.dense_weights)
             + tables * share.dense_weights) * model.dtype_bytes
    experts = (stage * model.moe_layers * share.experts_here * share.expert_slice
               * model.expert_params * model.expert_bytes_per_weight) if model.is_moe else 0.0
    return dense + experts


def deployment_kv_blocks(model: ModelSpec, hw: HardwareSpec, layout: Layout, block_size: int,
                         memory_utilization: float = 0.9, max_num_seqs: int = 256) -> int:
    """KV blocks (of block_size tokens, all layers) one replica holds in the memory its
    weights leave, per GPU: memory x utilisation - held weights.

    Windowed layers keep at most window + one block of each running sequence's tokens
    (vLLM's hybrid allocator frees the blocks that slide out), while the block manager
    counts a sequence's tokens at one size. Two counts are safe, and the larger is taken:
    every token priced at all layers' bytes (what a sequence inside its window holds),
    or the windows of max_num_seqs sequences reserved up front and the rest priced at
    the full-attention layers' bytes (what long sequences hold)."""
    share = layout.share(model)
    stage = share.stage
    per_layer = model.kv_bytes_per_token_layer * share.kv_per_token
    full = stage * model.full_layers * per_layer
    windowed = stage * model.windowed_layers * per_layer
    free = hw.memory_bytes * memory_utilization - held_weight_bytes(model, layout)
    if free <= 0:
        have = hw.memory_bytes * memory_utilization / 2**30
        need = held_weight_bytes(model, layout) / 2**30
        raise ValueError(f"model {model.name} leaves no KV memory on {layout.gpus} x {hw.name} "
                         f"({layout.describe()}): {need:.1f} GiB of weights per GPU, "
                         f"{have:.1f} GiB usable")
    tokens = free // (full + windowed)
    if full and windowed:
        seqs = -(-max_num_seqs // share.sequence_groups)
        reserved = free - seqs * (model.window + block_size) * windowed
        tokens = max(tokens, reserved // full)
    blocks = int(tokens // block_size) * share.sequence_groups
    if blocks < 1:
        raise ValueError(f"a KV block of {block_size:,} tokens (block_size) of {model.name} does "
                         f"not fit in the {free / 2**30:.2f} GiB per GPU its weights leave on "
                         f"{layout.gpus} x {hw.name} ({layout.describe()}): give a smaller block size")
    return blocks


def deployment_terms(model: ModelSpec, cost: DeploymentRoofline) -> str:
    """What a MoE / MLA / windowed model's price rests on, in words (the assumptions)."""
    parts = model_terms(model)
    if cost.a2a_bytes_per_token:
        parts.append("EP: an all-to-all dispatch and combine per MoE layer (latency as an all-reduce's)")
    if cost.stages > 1:
        parts.append(f"{cost.stages} stages priced as a pipeline round (micro-batches = "
                     f"min(stages, sequences))")
    return "; ".join(parts)


def model_terms(model: ModelSpec) -> list[str]:
    """The model's MoE, MLA, window and quantisation terms, in words (the roofline's and
    the GPU form's assumptions share them)."""
    parts = []
    if model.is_moe:
        shared = ", shared experts" if model.shared_expert_intermediate_size else ""
        parts.append(f"MoE: {model.experts_per_token} of {model.num_experts} experts per token in "
                     f"{model.moe_layers} layers; weights read = experts the step's tokens touch "
                     f"(uniform routing) + attention{shared}, router")
    if model.is_mla:
        parts.append(f"MLA: {model.kv_lora_rank + model.qk_rope_head_dim}-wide latent KV, decodes attend absorbed, prefills applied")
    if model.layer_windows:
        parts.append(f"{model.windowed_layers} of {model.num_layers} layers read at most "
                     f"{model.window} tokens")
    if model.quantization:
        parts.append(f"declared {model.quantization} weights")
    return parts
