"""The dense GPU form's step price, flattened for the simulator's loop and compiled
(batchlab/_compiled.py HOT): the default price (core/cost/served/model.py) asks it once a
step. It is GpuCostModel's arithmetic (core/cost/gpu_form.py) with the constants read
once, in the same order of operations, so it prices every step bit for bit as the form
does (tests/test_gpu_step.py).

The terms that do not grow along a decode run (everything but the KV and pair terms)
depend on the step's tokens (its GEMMs, elementwise kernels and all-reduce) or on its
sequences (the LM head): DenseGpuStep keeps each by what it depends on, since a simulation
prices the same few shapes a million times, and adds them up as the form does."""
from __future__ import annotations

import math
from typing import Any, Final

import numpy as np

from batchlab.core.cost.form import growing
from batchlab.core.features import StepFeatures, features_of
from batchlab.core.run_clock import RunClock

# cuBLAS's GEMM kernels for up to ~128 rows (small-M kernels) cost by the rows; beyond,
# whole tiles of rows (core/cost/gpu_form.py).
SMALL_M_ROWS: Final = 128

# Decode stretches shorter than this are priced in a plain loop, cheaper than numpy's
# set-up; longer ones by decode_run_times (the same arithmetic, vectorised). Compiled (this
# module's file an extension), the loop's step costs a few dozen instructions against
# numpy's ~30,000 a call: it wins up to a few hundred steps (a lone reply's whole run).
SHORT_PLAIN: Final = 48 if __file__.endswith(".py") else 256

# A step's terms are kept for steps of fewer tokens (and sequences) than this; larger ones
# (rare: static batches of whole prompts) are priced each time, to the same bits. (Final:
# compiled, a constant, not a look-up in the module's globals each step.)
KEPT_TOKENS: Final = 1 << 17
UNPRICED: Final = -1.0  # a kept term not priced yet (every term is a time: at least 0)


def gemm_rows(tokens: float, tile: float) -> float:
    """The rows a GEMM computes for `tokens` tokens: all of them up to SMALL_M_ROWS, whole
    tiles beyond."""
    if tokens <= SMALL_M_ROWS:
        return tokens
    return math.ceil(tokens / tile) * tile


def smooth(a: float, b: float, k: float) -> float:
    """(a^k + b^k)^(1/k): max(a, b) as k grows, a + b at k = 1. Scaled by the larger side
    so that powers of tiny times stay in range."""
    m = max(b, a)
    if m <= 0:
        return 0.0
    return m * ((a / m) ** k + (b / m) ** k) ** (1.0 / k)


class DenseGpuStep:
    """One dense GpuCostModel's step_time and decode runs (build it with `of`)."""

    def __init__(self, step_s: float, seq_s: float, layers: int, elementwise_floor: float,
                 elementwise_bytes: float, elementwise_bandwidth: float, attn_layer_s: float,
                 attn_seq_s: float, gemm_mem: list[float], gemm_flop: list[float], ridge_k: float,
                 gemm_fixed_s: float, tile: float, allreduce_factor: float, allreduce_bytes: float,
                 tensor_parallel: int, allreduce: Any, head_mem: float, head_flop: float,
                 kv_coef: float, pair_coef: float, self_coef: float, prefill_coef: float) -> None:
        self.step_s, self.seq_s, self.layers = step_s, seq_s, layers
        self.elementwise_floor, self.elementwise_bytes = elementwise_floor, elementwise_bytes
        self.elementwise_bandwidth = elementwise_bandwidth
        self.attn_layer_s, self.attn_seq_s = attn_layer_s, attn_seq_s
        self.gemm_mem, self.gemm_flop = gemm_mem, gemm_flop
        self.ridge_k, self.gemm_fixed_s, self.tile = ridge_k, gemm_fixed_s, tile
        self.allreduce_factor, self.allreduce_bytes = allreduce_factor, allreduce_bytes
        self.tensor_parallel, self.allreduce = tensor_parallel, allreduce
        self.head_mem, self.head_flop = head_mem, head_flop
        self.kv_coef, self.pair_coef = kv_coef, pair_coef
        self.self_coef, self.prefill_coef = self_coef, prefill_coef
        self.width = 1 + len(gemm_mem) + (1 if allreduce is not None else 0)  # token terms a step
        self.by_tokens: list[float] = []  # width terms per token count (_layer_terms)
        self.by_seqs: list[float] = []  # the LM head's price per sequence count

    @classmethod
    def of(cls, form: Any) -> DenseGpuStep:
        """The price of `form`, a dense GpuCostModel: its constants combined as its own
        methods combine them (_elementwise, _gemm, _base), so that each is the same float."""
        p, s, bw = form.params, form.shapes, form.mem_bandwidth
        e = s.elementwise_bytes_per_token
        return cls(p.step_s, p.seq_s, s.layers, p.layer_fixed_s + e / (bw * p.elementwise_row_efficiency),
                   e, bw * p.elementwise_efficiency, p.attn_layer_s, p.attn_seq_s,
                   list(form._gemm_mem), list(form._gemm_flop), p.ridge_k, p.gemm_fixed_s,
                   p.gemm_tile_tokens, s.allreduces_per_layer * p.allreduce_scale,
                   s.allreduce_bytes_per_token, s.tensor_parallel,
                   form.allreduce if s.allreduces_per_layer else None,
                   s.head.weight_bytes / (bw * p.mem_efficiency),
                   s.head.flops_per_token / (form.peak_flops * p.compute_efficiency),
                   form._kv_coef, form._pair_coef, form._self_coef, form._prefill_coef)

    def _gemm(self, mem: float, flop_per_token: float, tokens: int) -> float:
        rows = gemm_rows(tokens, self.tile)
        return smooth(mem, flop_per_token * rows, self.ridge_k) + self.gemm_fixed_s

    def _layer_terms(self, tokens: int) -> list[float]:
        """A layer's terms that depend on the step's tokens alone, in the order the base adds
        them: the elementwise kernels, each GEMM, the all-reduce (under TP)."""
        terms = [self.elementwise_floor + self.elementwise_bytes * tokens / self.elementwise_bandwidth]
        for i in range(len(self.gemm_mem)):
            terms.append(self._gemm(self.gemm_mem[i], self.gemm_flop[i], tokens))
        if self.allreduce is not None:
            terms.append(self.allreduce_factor * self.allreduce.time(tokens * self.allreduce_bytes,
                                                                     self.tensor_parallel))
        return terms

    def _sum(self, num_seqs: int, terms: list[float], at: int, t_head: float) -> float:
        """GpuCostModel._base from a step's token terms (terms[at:at + width]) and its LM head."""
        layer = terms[at] + self.attn_layer_s + self.attn_seq_s * num_seqs
        for j in range(1, self.width):
            layer += terms[at + j]
        return self.step_s + self.seq_s * num_seqs + self.layers * layer + t_head

    def base(self, num_seqs: int, tokens: int) -> float:
        """Everything but the KV and pair terms (GpuCostModel._base): constant along a
        decode run. The token terms and the LM head are kept by tokens and sequences."""
        if not (0 <= tokens < KEPT_TOKENS and 0 <= num_seqs < KEPT_TOKENS):
            t_head = self._gemm(self.head_mem, self.head_flop, num_seqs)
            return self._sum(num_seqs, self._layer_terms(tokens), 0, t_head)
        kept, width = self.by_tokens, self.width
        at = tokens * width
        if at >= len(kept):
            kept.extend([UNPRICED] * (at + width - len(kept)))
        if kept[at] < 0:
            terms = self._layer_terms(tokens)
            for j in range(width):
                kept[at + j] = terms[j]
        heads = self.by_seqs
        if num_seqs >= len(heads):
            heads.extend([UNPRICED] * (num_seqs + 1 - len(heads)))
        t_head = heads[num_seqs]
        if t_head < 0:
            t_head = self._gemm(self.head_mem, self.head_flop, num_seqs)
            heads[num_seqs] = t_head
        return self._sum(num_seqs, kept, at, t_head)

    def _fixed(self, f: StepFeatures) -> float:
        """What stays along a decode run from f: the base and the prefill chunks' extra
        attention (GpuCostModel._prefill_attention)."""
        return (self.base(f.num_seqs, f.prefill_tokens + f.decode_tokens)
                + (self.self_coef * f.prefill_self_pairs + self.prefill_coef * f.prefill_tokens))

    def step_time(self, f: StepFeatures) -> float:
        return self._fixed(f) + (self.kv_coef * f.kv_tokens_read + self.pair_coef * f.attention_pairs)

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        kv, pairs = growing(f, m)
        return self._fixed(f) + (self.kv_coef * kv + self.pair_coef * pairs)

    def decode_times(self, n: int, kv0: int, m: int) -> list[float]:
        """step_time of m decode-only steps of n sequences reading kv0, kv0 + n, ... KV
        tokens (attending as many pairs): a plain loop for short stretches, the vectorised
        run for long ones."""
        if m >= SHORT_PLAIN:
            return self.decode_run_times(features_of(n, 0, 0, n, kv0, kv0, 0, 0, 0, 0, 0, 0, 0), m).tolist()
        fixed = self._decode_fixed(n)
        kv_coef, pair_coef = self.kv_coef, self.pair_coef
        out: list[float] = []
        for j in range(m):  # a for statement: compiled, a comprehension's range is a Python call
            kv = kv0 + j * n
            out.append(fixed + (kv_coef * kv + pair_coef * kv))
        return out

    def decode_into(self, clock: RunClock, n: int, kv0: int, m: int) -> None:
        """decode_times onto a run's clock: the same line, summed there."""
        clock.line(self._decode_fixed(n), self.kv_coef, self.pair_coef, kv0, n, m)

    def _decode_fixed(self, n: int) -> float:
        """_fixed of a decode-only step of n sequences, without building its features."""
        return self.base(n, n) + (self.self_coef * 0 + self.prefill_coef * 0)
