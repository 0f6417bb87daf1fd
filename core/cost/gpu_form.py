"""The GPU cost form (docs/cost-form.md section 3): a step's seconds from its features and
one GPU's operator shapes, with constants fitted on measured operators (a GPU profile,
core/cost/gpu_profile.py).

    t = c_step + c_seq * num_seqs
        + layers * [ c_layer + E_elem / B_row + E_elem * T / B_elem
                     + sum over GEMMs (smooth(W / B_mem, F * rows(T) / P ; k) + c_gemm)
                     + c_attn + a_seq * num_seqs + KV * kv_tokens_read / B_kv + A * pairs / P_attn
                     + A * (r_self - 1) * prefill_self_pairs / P_attn + a_tok * prefill_tokens
                     + n_ar * s_ar * allreduce(T * hidden * act_bytes, tp) ]
        + smooth(W_head / B_mem, F_head * rows(num_seqs) / P ; k) + c_gemm
    smooth(a, b; k) = (a^k + b^k)^(1/k)

B_mem, B_elem, B_row, B_kv are the datasheet bandwidth times fitted efficiencies; P and
P_attn the datasheet peak times fitted efficiencies. E_elem / B_row is the elementwise
kernels' floor at few tokens: one thread block per token row walks the whole row, so a
step of one token still costs in proportion to the row's bytes (Vidur's norms and SwiGLU
at 1-64 tokens). c_gemm sits outside the ridge: a launch and a tail that every GEMM pays,
memory- or compute-bound (measured small GEMMs fall short on both sides alike). rows(T) is
T up to SMALL_M_ROWS, whole gemm_tile_tokens tiles beyond (gemm_rows). s_ar scales the measured
all-reduce table (1; sensitivity varies it).

A prefill chunk's own (causal) pairs cost r_self times a pair against cached keys (the
diagonal blocks are masked, smaller and less pipelined: 2-4x in Vidur's A100 timings),
and each prefill token a_tok (its query tile's loads, softmax state and output writes),
in proportion to the query heads a GPU holds (A_TOK_REFERENCE_PAIR_FLOPS).
r_self = 1 and a_tok = 0 price as a profile without them did.

Only the attention terms change along a steady decode run (T and num_seqs stay), so the
fast-forward's vectorised run is the same arithmetic as step_time, bit for bit.

Mixture-of-experts layers, windowed and latent attention, EP and PP (shapes that are not
dense: OperatorShapes.is_dense) are priced by core/cost/gpu_deployment.py, a subclass with
the same constants; core/cost/dispatch.py `gpu_cost` picks the class once."""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, fields, replace

import numpy as np

from batchlab.core.cost.form import FormDefaults, growing
from batchlab.core.cost.gpu_step import SMALL_M_ROWS, gemm_rows, smooth  # compiled: every GEMM's price
from batchlab.core.cost.operator_shapes import Gemm, OperatorShapes
from batchlab.core.features import StepFeatures


@dataclass(frozen=True, slots=True)
class GpuCostParams:
    """The form's constants for one GPU (seconds, or fractions of the datasheet)."""
    mem_efficiency: float  # B_mem = datasheet bandwidth x this
    compute_efficiency: float  # P = datasheet peak for the weights' dtype x this
    ridge_k: float  # smooth(): large k is a bare max, k = 1 a sum
    gemm_fixed_s: float  # c_gemm: per GEMM (launch and tail)
    layer_fixed_s: float  # c_layer: the elementwise kernels' launches, per layer
    elementwise_efficiency: float  # B_elem = datasheet bandwidth x this
    elementwise_row_efficiency: float  # B_row = datasheet bandwidth x this (one token row's floor)
    attn_layer_s: float  # the attention kernel's fixed cost per layer
    attn_seq_s: float  # a_seq: per sequence and layer
    attn_kv_efficiency: float  # B_kv = datasheet bandwidth x this
    attn_pair_efficiency: float  # P_attn = 16-bit peak x this
    step_s: float  # c_step: the engine's per-step cost (scheduling, sampling, launches)
    seq_s: float  # c_seq: its per-sequence cost
    allreduce_scale: float = 1.0  # the all-reduce table's times x this (sensitivity varies it)
    gemm_tile_tokens: float = 128.0  # past SMALL_M_ROWS a GEMM computes whole tiles of this many rows
    attn_self_pair_cost: float = 1.0  # r_self: a chunk's own pair costs this many cached-key pairs
    attn_prefill_token_s: float = 0.0  # a_tok: per prefill token and layer

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def scaled(self, memory: float, compute: float) -> GpuCostParams:
        """The machine `memory` times as slow on fixed costs and bytes, `compute` on FLOPs."""
        return replace(self, mem_efficiency=self.mem_efficiency / memory,
                       elementwise_efficiency=self.elementwise_efficiency / memory,
                       elementwise_row_efficiency=self.elementwise_row_efficiency / memory,
                       attn_kv_efficiency=self.attn_kv_efficiency / memory,
                       compute_efficiency=self.compute_efficiency / compute,
                       attn_pair_efficiency=self.attn_pair_efficiency / compute,
                       **{n: getattr(self, n) * memory for n in FIXED_COSTS})


# cuBLAS's GEMM kernels for up to ~128 rows (small-M kernels) cost by the rows; for more,
# whole tiles of rows: Vidur's timings step up just past multiples of the tile and stay
# flat between (128 rows on the H100; the A100's and A40's fit 64 better). The profile
# picks its tile among TILE_CHOICES by the fit's error.
GEMM_TILE_TOKENS = 128.0
TILE_CHOICES = (64.0, 128.0)


# a_tok is fitted on the one attention table there is (Vidur's A100 rows: a 70B shape at TP 2,
# 32 query heads of 128 a GPU) and is a query tile's loads, softmax state and output writes
# per prefill token: it scales with the query heads a GPU holds, as a pair's FLOPs do. Per
# prefill token and layer, a_tok x (this GPU's FLOPs a pair / the table's).
A_TOK_REFERENCE_PAIR_FLOPS = 4.0 * 32 * 128


def prefill_token_width(attn_flops_per_pair: float) -> float:
    """The factor on a_tok for a GPU whose attention does this many FLOPs a pair."""
    return attn_flops_per_pair / A_TOK_REFERENCE_PAIR_FLOPS


FIXED_COSTS = ("gemm_fixed_s", "layer_fixed_s", "attn_layer_s", "attn_seq_s", "step_s", "seq_s",
               "attn_prefill_token_s")


@dataclass(frozen=True, slots=True)
class AllReduce:
    """One all-reduce's seconds by message bytes and GPU count: log-log interpolation of a
    measured table per GPU count (its interconnect's), else latency + ring bytes / bandwidth."""
    table: dict[int, tuple[tuple[float, ...], tuple[float, ...]]]  # gpus -> (bytes, seconds), sorted
    latency_s: float
    bandwidth: float  # bytes/s per GPU, one way

    def time(self, nbytes: float, gpus: int) -> float:
        if gpus <= 1 or nbytes <= 0:
            return 0.0
        measured = self.table.get(gpus)
        if measured is None:
            return self.latency_s + 2 * (gpus - 1) / gpus * nbytes / self.bandwidth
        sizes, times = measured
        if nbytes <= sizes[0]:
            return times[0]  # the latency floor
        if nbytes >= sizes[-1]:
            return times[-1] * nbytes / sizes[-1]  # bandwidth-bound beyond the table
        i = bisect.bisect_right(sizes, nbytes)
        x0, x1 = math.log(sizes[i - 1]), math.log(sizes[i])
        y0, y1 = math.log(times[i - 1]), math.log(times[i])
        return math.exp(y0 + (y1 - y0) * (math.log(nbytes) - x0) / (x1 - x0))


@dataclass(frozen=True, slots=True)
class GpuCostModel(FormDefaults):
    """One GPU of a dense model at TP priced by the GPU form. Build with
    core/cost/dispatch.py gpu_cost(), or this class's build() for dense shapes."""
    shapes: OperatorShapes
    params: GpuCostParams
    mem_bandwidth: float  # datasheet bytes/s
    peak_flops: float  # datasheet FLOP/s for the weights' dtype
    peak_flops_16: float  # datasheet 16-bit FLOP/s (attention)
    allreduce: AllReduce
    # derived (gpu_cost fills them)
    _gemm_mem: tuple[float, ...] = ()
    _gemm_flop: tuple[float, ...] = ()
    _kv_coef: float = 0.0  # layers x seconds per KV token read
    _pair_coef: float = 0.0  # layers x seconds per pair
    _self_coef: float = 0.0  # layers x extra seconds per prefill self pair
    _prefill_coef: float = 0.0  # layers x seconds per prefill token (attention)

    @classmethod
    def build(cls, shapes: OperatorShapes, params: GpuCostParams, mem_bandwidth: float,
              peak_flops: float, peak_flops_16: float, allreduce: AllReduce) -> GpuCostModel:
        """The form for these shapes on a GPU of these datasheet figures."""
        p = params
        b_mem, peak = mem_bandwidth * p.mem_efficiency, peak_flops * p.compute_efficiency
        gemm_mem = tuple(g.weight_bytes / b_mem for g in shapes.gemms)
        gemm_flop = tuple(g.flops_per_token / peak for g in shapes.gemms)
        kv_coef = shapes.layers * shapes.kv_bytes_per_token / (mem_bandwidth * p.attn_kv_efficiency)
        pair_coef = shapes.layers * shapes.attn_flops_per_pair / (peak_flops_16 * p.attn_pair_efficiency)
        return cls(shapes, params, mem_bandwidth, peak_flops, peak_flops_16, allreduce,
                   gemm_mem, gemm_flop, kv_coef, pair_coef, pair_coef * (p.attn_self_pair_cost - 1),
                   shapes.layers * p.attn_prefill_token_s * prefill_token_width(shapes.attn_flops_per_pair),
                   **cls.extra_terms(shapes, params, mem_bandwidth, peak_flops_16, b_mem, peak))

    @classmethod
    def extra_terms(cls, shapes: OperatorShapes, params: GpuCostParams, mem_bandwidth: float,
                    peak_flops_16: float, b_mem: float, peak: float) -> dict:
        """Fields a subclass adds (core/cost/gpu_deployment.py); none for a dense model."""
        return {}

    @property
    def window(self) -> int:
        """The model's sliding window (0: none): the simulator's windowed features read it."""
        return self.shapes.window_tokens

    def _gemm(self, mem: float, flop_per_token: float, tokens: int) -> float:
        rows = gemm_rows(tokens, self.params.gemm_tile_tokens)
        return smooth(mem, flop_per_token * rows, self.params.ridge_k) + self.params.gemm_fixed_s

    def _elementwise(self, tokens: int) -> float:
        p, e = self.params, self.shapes.elementwise_bytes_per_token
        return (p.layer_fixed_s + e / (self.mem_bandwidth * p.elementwise_row_efficiency)
                + e * tokens / (self.mem_bandwidth * p.elementwise_efficiency))

    def _base(self, num_seqs: int, tokens: int) -> float:
        """Everything but the KV and pair terms: constant along a decode run."""
        p, s = self.params, self.shapes
        layer = self._elementwise(tokens) + p.attn_layer_s + p.attn_seq_s * num_seqs
        for mem, flop in zip(self._gemm_mem, self._gemm_flop):
            layer += self._gemm(mem, flop, tokens)
        if s.allreduces_per_layer:
            layer += s.allreduces_per_layer * p.allreduce_scale * self.allreduce.time(
                tokens * s.allreduce_bytes_per_token, s.tensor_parallel)
        head = s.head
        rows = num_seqs
        t_head = self._gemm(head.weight_bytes / (self.mem_bandwidth * p.mem_efficiency),
                            head.flops_per_token / (self.peak_flops * p.compute_efficiency), rows)
        return p.step_s + p.seq_s * num_seqs + s.layers * layer + t_head

    def _prefill_attention(self, f: StepFeatures) -> float:
        """The prefill chunks' extra attention: constant along a decode run."""
        return self._self_coef * f.prefill_self_pairs + self._prefill_coef * f.prefill_tokens

    def step_time(self, f: StepFeatures) -> float:
        base = self._base(f.num_seqs, f.prefill_tokens + f.decode_tokens) + self._prefill_attention(f)
        return base + (self._kv_coef * f.kv_tokens_read + self._pair_coef * f.attention_pairs)

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        kv, pairs = growing(f, m)
        base = self._base(f.num_seqs, f.prefill_tokens + f.decode_tokens) + self._prefill_attention(f)
        return base + (self._kv_coef * kv + self._pair_coef * pairs)

    def at_speed(self, memory: float, compute: float | None = None) -> GpuCostModel:
        """Fixed costs and bytes `memory` times as slow, FLOPs `compute` times (None: as
        memory); the collectives as priced."""
        return self.build(self.shapes, self.params.scaled(memory, memory if compute is None else compute),
                          self.mem_bandwidth, self.peak_flops, self.peak_flops_16, self.allreduce)

    def layer_time(self, tokens: int) -> float:
        """One layer's GEMMs, elementwise kernels and fixed cost at `tokens` tokens (no
        attention, no collective): what Vidur's mlp.csv times, for the calibration."""
        gemms = [self._gemm(m, fl, tokens) for m, fl in zip(self._gemm_mem, self._gemm_flop)]
        return sum(gemms) + self._elementwise(tokens)


__all__ = ["AllReduce", "Gemm", "GpuCostModel", "GpuCostParams", "SMALL_M_ROWS", "gemm_rows", "prefill_token_width",
           "smooth"]
