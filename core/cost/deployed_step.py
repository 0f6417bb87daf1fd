"""The deployed GPU form's step price (core/cost/gpu_deployment.py: MoE, MLA, windowed
models) for the simulator's loop, compiled (batchlab/_compiled.py HOT): the default price
(core/cost/served/model.py) asks it where the form has one stage (no PP).

price()'s attention terms are added here in its order of operations, to its constant
part (DeployedGpuCost.fixed: kept here by batch size for decode-only steps; for mixed
steps added up here as stage_sum adds it, from stage_terms kept by tokens and the LM
head by sequences), so every step is priced bit for bit as the form prices it
(tests/test_fast_forward_window.py); the interpreted form is asked only for a shape it
has not priced yet."""
from __future__ import annotations

from typing import Any

from batchlab.core.cost.form import line_times
from batchlab.core.cost.gpu_deployment import stage_terms
from batchlab.core.features import StepFeatures
from batchlab.core.run_clock import RunClock

UNPRICED = -1.0  # a kept fixed part not priced yet (every one is a time: at least 0)
# Mixed steps' terms are kept for fewer tokens (and sequences) than this; larger ones
# (rare: whole long prompts) are asked of the form, to the same bits.
KEPT_TOKENS = 1 << 17


class DeployedStep:
    """One one-stage DeployedGpuCost's step_time and decode stretches (build it with `of`)."""

    def __init__(self, form: Any, kv: float, pair: float, window_kv: float, window_pair: float,
                 prefill_pair: float, self_pair: float, prefill_token: float) -> None:
        self.form = form
        self.kv, self.pair, self.window_kv, self.window_pair = kv, pair, window_kv, window_pair
        self.windowed = bool(window_kv or window_pair)
        self.prefill_pair, self.self_pair, self.prefill_token = prefill_pair, self_pair, prefill_token
        self.by_seqs: list[float] = []  # decode-only steps' fixed part by batch size
        p, shapes = form.params, form.shapes
        self.step_s: float = p.step_s
        self.seq_s: float = p.seq_s
        self.attn_layer_s: float = p.attn_layer_s
        self.attn_seq_s: float = p.attn_seq_s
        # counts, some held as floats (a share of layers): as floats, the same products
        self.groups: float = shapes.sequence_groups
        self.layers: float = shapes.layers
        self.dense_layers: float = shapes.dense_mlp_layers
        self.moe_layers: float = shapes.moe_layers
        # stage_terms by tokens, flat: elementwise, the layer's terms, dense MLP, MoE layer
        self.width = 0  # terms a token count (set by the first one kept)
        self.by_tokens: list[float] = []
        self.heads: list[float] = []  # the LM head's GEMM by sequences

    @classmethod
    def of(cls, form: Any) -> DeployedStep | None:
        """The step of a DeployedGpuCost of one stage; None for PP (asked itself)."""
        if form.shapes.stages != 1:
            return None
        d = form.terms
        return cls(form, d.kv, d.pair, d.window_kv, d.window_pair, d.prefill_pair, d.self_pair,
                   d.prefill_token)

    def fixed(self, seqs: int) -> float:
        """DeployedGpuCost.fixed(seqs, seqs), kept."""
        kept = self.by_seqs
        if seqs >= len(kept):
            kept.extend([UNPRICED] * (seqs + 1 - len(kept)))
        t = kept[seqs]
        if t < 0:
            t = float(self.form.fixed(seqs, seqs))
            kept[seqs] = t
        return t

    def step_time(self, f: StepFeatures) -> float:
        """price(form, ...) of f (DeployedGpuCost.step_time), term by term in its order."""
        attn = self.kv * f.kv_tokens_read + self.pair * f.attention_pairs
        prefill = self.self_pair * f.prefill_self_pairs + self.prefill_token * f.prefill_tokens
        if prefill:
            attn = attn + prefill
        if self.windowed:
            attn = attn + self.window_kv * f.window_kv_tokens_read + self.window_pair * f.window_attention_pairs
        if self.prefill_pair:
            attn = attn + self.prefill_pair * f.prefill_attention_pairs
        tokens = f.prefill_tokens + f.decode_tokens
        if tokens == f.num_seqs:
            return self.fixed(tokens) + attn
        return self.mixed_fixed(f.num_seqs, tokens) + attn

    def _terms_at(self, tokens: int) -> int:
        """Where tokens' stage_terms start in by_tokens (kept there first if need be)."""
        kept, width = self.by_tokens, self.width
        at = tokens * width
        if width and at < len(kept) and kept[at] >= 0:
            return at
        terms = stage_terms(self.form, self.form.terms, tokens)
        if not width:
            width = self.width = 3 + len(terms.layer)
            at = tokens * width
        if at >= len(kept):
            kept.extend([UNPRICED] * (at + width - len(kept)))
        kept[at] = terms.elementwise
        for j in range(len(terms.layer)):
            kept[at + 1 + j] = terms.layer[j]
        kept[at + width - 2] = terms.dense_mlp
        kept[at + width - 1] = terms.moe
        return at

    def _head(self, seqs: int) -> float:
        heads = self.heads
        if seqs >= len(heads):
            heads.extend([UNPRICED] * (seqs + 1 - len(heads)))
        t = heads[seqs]
        if t < 0:
            d = self.form.terms
            t = float(self.form._gemm(d.head_mem, d.head_flop, seqs))
            heads[seqs] = t
        return t

    def mixed_fixed(self, seqs: int, tokens: int) -> float:
        """DeployedGpuCost.fixed(seqs, tokens) (its stage_sum in its order of operations)."""
        if not (0 <= tokens < KEPT_TOKENS and 0 <= seqs < KEPT_TOKENS):
            return float(self.form.fixed(seqs, tokens))
        at = self._terms_at(tokens)
        head = self._head(seqs)
        kept, width = self.by_tokens, self.width
        layer = kept[at] + self.attn_layer_s + self.attn_seq_s * seqs / self.groups
        for j in range(1, width - 2):
            layer += kept[at + j]
        t = self.layers * layer
        if self.dense_layers:
            t += self.dense_layers * kept[at + width - 2]
        if self.moe_layers:
            t += self.moe_layers * kept[at + width - 1]
        return self.step_s + self.seq_s * seqs + (t + head)

    def decode_times(self, n: int, kv0: int, m: int) -> list[float]:
        """DeployedGpuCost.decode_times of a form without windows."""
        return line_times(self.fixed(n), self.kv, self.pair, 0.0, 0.0, False, n, kv0, 0, 0, m)

    def decode_into(self, clock: RunClock, n: int, kv0: int, m: int) -> None:
        """decode_times onto a run's clock (core/run_clock.py: line_times' arithmetic)."""
        clock.line(self.fixed(n), self.kv, self.pair, kv0, n, m)

    def window_decode_times(self, n: int, kv0: int, w0: int, u: int, m: int) -> list[float]:
        return line_times(self.fixed(n), self.kv, self.pair, self.window_kv, self.window_pair,
                          self.windowed, n, kv0, w0, u, m)
