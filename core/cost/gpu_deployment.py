"""The GPU cost form for what a dense layer at TP does not have (docs/cost-form.md
section 3): mixture-of-experts layers, windowed and latent (MLA) attention, expert and
pipeline parallelism. DeployedGpuCost extends core/cost/gpu_form.py's GpuCostModel with
these terms; core/cost/dispatch.py builds it for shapes that are not dense
(OperatorShapes.is_dense), so a dense model at TP never reaches them.

Per MoE layer, besides the attention GEMMs every layer runs (and the dense MLP of the
dense layers):
    sum over router, shared experts: gemm(W / B_mem, F * rows(T) / P)
    + sum over gate_up (2/3), down (1/3):
          gemm(touched * W_e * part / B_mem, F_e * part * r * rows(T) / P)
    + 2 * s_ar * all_to_all(T * a2a bytes)                       (EP: dispatch, combine)
    touched = E_gpu * (1 - (1 - k/E)^T)   experts the step's T tokens are expected to touch
    r = k * E_gpu / E                     routed rows a step token brings this GPU
where gemm(a, b) = smooth(a, b; k_ridge) + c_gemm, the profile's fitted constants: the
experts are grouped GEMMs over the touched experts' weights and the routed rows, on the
same ridge as a dense GEMM. With k = E they are a dense MLP of E experts' width exactly.

Attention: full layers from kv_tokens_read and attention_pairs, windowed layers from
window_kv_tokens_read and window_attention_pairs, and MLA's prefill pairs at the applied
projections' FLOPs (prefill_attention_pairs: the difference to the absorbed form's).

PP (core/cost/deployment.py's round): the step's sequences run as m = min(pp, seqs)
micro-batches; step = c_step + c_seq * seqs + pp * stage(seqs/m, T/m, attention/m)
+ (pp - 1) * s_ar * (latency + hop bytes * T/m / bandwidth), the profile's collective
fallback. The all-to-all is priced as an all-reduce moving the same bytes per GPU (the
measured table where it has the GPU count): no all-to-all was measured."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from batchlab.core.cost.gpu_form import AllReduce, GpuCostModel, GpuCostParams, prefill_token_width
from batchlab.core.cost.operator_shapes import OperatorShapes
from batchlab.core.cost.form import line_times, stretch_times, window_stretch_times
from batchlab.core.features import StepFeatures, features_of

# One routed expert's gated MLP as its two grouped GEMMs: gate_up (two of its three
# matrices) and down.
EXPERT_PARTS = (2 / 3, 1 / 3)


class Deployed(NamedTuple):
    """The form's seconds per unit of each non-dense term (DeployedGpuCost.build fills it)."""
    dense_mlp: tuple[tuple[float, float], ...]  # (W / B_mem, F / P) of the dense layers' MLP
    moe: tuple[tuple[float, float], ...]  # router, shared experts
    expert_mem: float  # one expert's bytes / B_mem
    expert_flop: float  # one routed token through one expert / P
    kv: float  # full layers x seconds per KV token read
    pair: float
    window_kv: float  # windowed layers'
    window_pair: float
    prefill_pair: float  # MLA: a prefill pair's extra (applied less absorbed; negative)
    self_pair: float  # a prefill chunk's own pair's extra (r_self - 1 times a pair's price)
    prefill_token: float  # layers x a_tok: a prefill token's attention extra
    head_mem: float
    head_flop: float


def deployed_terms(s: OperatorShapes, b_mem: float, peak: float, b_kv: float, p_attn: float,
                   self_pair_cost: float = 1.0, prefill_token_s: float = 0.0) -> Deployed:
    full = s.layers - s.window_layers
    prefill_pair_flops = s.prefill_attn_flops_per_pair or s.attn_flops_per_pair  # MLA: applied
    return Deployed(
        dense_mlp=tuple((g.weight_bytes / b_mem, g.flops_per_token / peak) for g in s.dense_mlp_gemms),
        moe=tuple((g.weight_bytes / b_mem, g.flops_per_token / peak) for g in s.moe_gemms),
        expert_mem=s.experts.expert_bytes / b_mem, expert_flop=s.experts.expert_flops_per_token / peak,
        kv=full * s.kv_bytes_per_token / b_kv, pair=full * s.attn_flops_per_pair / p_attn,
        window_kv=s.window_layers * s.kv_bytes_per_token / b_kv,
        window_pair=s.window_layers * s.attn_flops_per_pair / p_attn,
        prefill_pair=(s.layers * (s.prefill_attn_flops_per_pair - s.attn_flops_per_pair) / p_attn
                      if s.prefill_attn_flops_per_pair else 0.0),
        self_pair=s.layers * prefill_pair_flops / p_attn * (self_pair_cost - 1),
        prefill_token=s.layers * prefill_token_s * prefill_token_width(prefill_pair_flops),
        head_mem=s.head.weight_bytes / b_mem, head_flop=s.head.flops_per_token / peak)


def all_to_all(allreduce: AllReduce, nbytes: float, gpus: int) -> float:
    """An all-to-all in which each GPU sends nbytes: an all-reduce whose ring moves as
    many bytes per GPU (2 (g - 1)/g of its message)."""
    if gpus <= 1:
        return 0.0
    return allreduce.time(nbytes * gpus / (2 * (gpus - 1)), gpus)


def _moe_layer(c: GpuCostModel, d: Deployed, tokens: float) -> float:
    s, p, e = c.shapes, c.params, c.shapes.experts
    t = 0.0
    for mem, flop in d.moe:
        t += c._gemm(mem, flop, tokens)
    touched = e.experts * (1 - (1 - e.top_k / e.total) ** tokens)
    routed = e.top_k * e.experts / e.total
    for part in EXPERT_PARTS:
        t += c._gemm(touched * d.expert_mem * part, d.expert_flop * part * routed, tokens)
    if s.all_to_all_bytes_per_token:
        t += 2 * p.allreduce_scale * all_to_all(c.allreduce, tokens * s.all_to_all_bytes_per_token,
                                                s.expert_parallel)
    return t


class StageTerms(NamedTuple):
    """stage_base's terms that depend on the step's tokens alone."""
    elementwise: float
    layer: tuple[float, ...]  # a layer's GEMMs, then its all-reduce (under TP)
    dense_mlp: float  # a dense layer's MLP
    moe: float  # a MoE layer


def stage_terms(c: GpuCostModel, d: Deployed, tokens: float) -> StageTerms:
    p, s = c.params, c.shapes
    layer = [c._gemm(mem, flop, tokens) for mem, flop in zip(c._gemm_mem, c._gemm_flop)]
    if s.allreduces_per_layer:
        layer.append(s.allreduces_per_layer * p.allreduce_scale * c.allreduce.time(
            tokens * s.allreduce_bytes_per_token, s.tensor_parallel))
    dense = sum(c._gemm(mem, flop, tokens) for mem, flop in d.dense_mlp) if s.dense_mlp_layers else 0.0
    return StageTerms(c._elementwise(tokens), tuple(layer), dense,
                      _moe_layer(c, d, tokens) if s.moe_layers else 0.0)


def stage_sum(c: GpuCostModel, terms: StageTerms, seqs: float, head: float) -> float:
    """stage_base from its token terms and its LM head (head: the head's GEMM at seqs
    rows), added in one order, so that kept terms give the same bits."""
    p, s = c.params, c.shapes
    layer = terms.elementwise + p.attn_layer_s + p.attn_seq_s * seqs / s.sequence_groups
    for x in terms.layer:
        layer += x
    t = s.layers * layer
    if s.dense_mlp_layers:
        t += s.dense_mlp_layers * terms.dense_mlp
    if s.moe_layers:
        t += s.moe_layers * terms.moe
    return t + head


def stage_base(c: GpuCostModel, d: Deployed, seqs: float, tokens: float) -> float:
    """One GPU's stage for a micro-batch of seqs sequences and tokens tokens, less the KV
    and pair terms (constant along a decode run)."""
    return stage_sum(c, stage_terms(c, d, tokens), seqs, c._gemm(d.head_mem, d.head_flop, seqs))


def price(c: DeployedGpuCost, d: Deployed, seqs: int, tokens: int, kv, pairs, w_kv, w_pairs, p_pairs,
          prefill: float = 0.0):
    """A step's seconds; kv .. p_pairs numbers or numpy arrays alike (decode_run_times),
    the same arithmetic either way; prefill: the chunks' own extra attention (prefill_extra)."""
    p, s = c.params, c.shapes
    attn = d.kv * kv + d.pair * pairs
    if prefill:
        attn = attn + prefill
    if d.window_kv or d.window_pair:
        attn = attn + d.window_kv * w_kv + d.window_pair * w_pairs
    if d.prefill_pair:
        attn = attn + d.prefill_pair * p_pairs
    pp = s.stages
    if pp == 1:
        return c.fixed(seqs, tokens) + attn
    m = max(1, min(pp, seqs))
    hop = p.allreduce_scale * (c.allreduce.latency_s
                               + s.send_recv_bytes_per_token * tokens / m / c.allreduce.bandwidth)
    stage = c.stage(seqs / m, tokens / m) + attn / m
    return p.step_s + p.seq_s * seqs + pp * stage + (pp - 1) * hop


def prefill_extra(d: Deployed, f: StepFeatures) -> float:
    """The prefill chunks' own pairs and tokens (core/cost/gpu_form.py docstring): constant
    along a decode run. A windowed layer's chunk of more than its window is over-priced by
    the pairs beyond it (a window is thousands of tokens; chunks rarely pass one)."""
    return d.self_pair * f.prefill_self_pairs + d.prefill_token * f.prefill_tokens


@dataclass(frozen=True, slots=True)
class DeployedGpuCost(GpuCostModel):
    """One GPU of the busiest stage of a MoE, MLA or windowed model, or of a layout with
    PP, EP or DP attention, priced by the GPU form with these terms."""
    terms: Deployed | None = None  # build() fills it
    # stage_base's terms kept by tokens, and its LM head by sequences: a simulation prices
    # the same few shapes again and again (as core/cost/gpu_step.py keeps a dense form's)
    _by_tokens: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _by_seqs: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _decode_fixed: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def fixed(self, seqs: int, tokens: int) -> float:
        """A one-stage step's seconds less its attention terms (price()'s sum, in its
        order); kept for decode-only shapes (tokens = seqs), a few hundred at most."""
        if seqs == tokens:
            t = self._decode_fixed.get(seqs)
            if t is None:
                p = self.params
                t = self._decode_fixed[seqs] = p.step_s + p.seq_s * seqs + self.stage(seqs, tokens)
            return t
        p = self.params
        return p.step_s + p.seq_s * seqs + self.stage(seqs, tokens)

    def stage(self, seqs: float, tokens: float) -> float:
        """stage_base(self, terms, seqs, tokens), from the kept terms: the same bits."""
        d = self.terms
        assert d is not None
        terms = self._by_tokens.get(tokens)
        if terms is None:
            terms = self._by_tokens[tokens] = stage_terms(self, d, tokens)
        head = self._by_seqs.get(seqs)
        if head is None:
            head = self._by_seqs[seqs] = self._gemm(d.head_mem, d.head_flop, seqs)
        return stage_sum(self, terms, seqs, head)

    @classmethod
    def extra_terms(cls, shapes: OperatorShapes, params: GpuCostParams, mem_bandwidth: float,
                    peak_flops_16: float, b_mem: float, peak: float) -> dict:
        p = params
        return {"terms": deployed_terms(shapes, b_mem, peak, mem_bandwidth * p.attn_kv_efficiency,
                                        peak_flops_16 * p.attn_pair_efficiency, p.attn_self_pair_cost,
                                        p.attn_prefill_token_s)}

    def step_time(self, f: StepFeatures) -> float:
        d = self.terms
        assert d is not None
        return float(price(self, d, f.num_seqs, f.prefill_tokens + f.decode_tokens, f.kv_tokens_read,
                           f.attention_pairs, f.window_kv_tokens_read, f.window_attention_pairs,
                           f.prefill_attention_pairs, prefill_extra(d, f)))

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        """m steady decode steps: KV reads and pairs grow by num_seqs a step, the windowed
        ones capped at num_seqs * window (as core/cost/deployment.py: exact for a
        window-free model, and for a windowed one whose sequences are all inside, or all
        past, it)."""
        d = self.terms
        assert d is not None
        grow = np.arange(m, dtype=np.int64) * f.num_seqs
        w_kv, w_pairs = f.window_kv_tokens_read + grow, f.window_attention_pairs + grow
        window = self.shapes.window_tokens
        if window:
            cap = f.num_seqs * window
            w_kv = np.minimum(w_kv, max(cap, f.window_kv_tokens_read))
            w_pairs = np.minimum(w_pairs, max(cap, f.window_attention_pairs))
        t = price(self, d, f.num_seqs, f.prefill_tokens + f.decode_tokens, f.kv_tokens_read + grow,
                  f.attention_pairs + grow, w_kv, w_pairs, f.prefill_attention_pairs, prefill_extra(d, f))
        return np.broadcast_to(t, (m,)).astype(float)

    def _line(self, n: int, kv0: int, w0: int, u: int, m: int) -> list[float]:
        """step_time of m decode-only steps, one stage (no PP): price()'s arithmetic with
        its constant part added once. (The MLA prefill pairs' term adds d.prefill_pair * 0,
        a zero, to a sum of non-negative terms: left out, the same bits.)"""
        d = self.terms
        assert d is not None
        return line_times(self.fixed(n, n), d.kv, d.pair, d.window_kv, d.window_pair,
                          bool(d.window_kv or d.window_pair), n, kv0, w0, u, m)

    def decode_times(self, n: int, kv0: int, m: int) -> list[float]:
        d = self.terms
        assert d is not None
        if self.shapes.stages != 1 or d.window_kv or d.window_pair:
            # PP; or a windowed model's, as FormDefaults prices them (its long stretches by
            # decode_run_times, which grows windowed reads: a speculative draft's passes)
            return stretch_times(self, n, kv0, m)
        return line_times(self.fixed(n, n), d.kv, d.pair, 0.0, 0.0, False, n, kv0, 0, 0, m)

    def window_decode_times(self, n: int, kv0: int, w0: int, u: int, m: int) -> list[float]:
        """Decode steps with windowed reads w0, w0 + u, ...: step_time's arithmetic (with
        PP, step by step)."""
        if self.shapes.stages != 1:
            return window_stretch_times(self, n, kv0, w0, u, m)
        return self._line(n, kv0, w0, u, m)
