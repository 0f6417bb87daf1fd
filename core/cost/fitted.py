"""The calibrated cost form: a memory-bandwidth-bound step with a compute roofline,
fitted to backend timings (calibration/fit/fitted_form.py) and read back from a profile.

    t = overhead + per_seq * seqs + per_chunk * prefill_seqs
        + after_prefill_s * after_prefill + after_idle_s * after_idle
        + layer_weight_bytes / mem_bandwidth (+|max) layer_flops * tokens / flop_rate
        + head_weight_bytes / mem_bandwidth (+|max) head_flops * sampled_rows / flop_rate
        + kv_bytes * kv_tokens_read / kv_bandwidth
        + attn_flops * attention_pairs / attn_flop_rate
        + attn_flops * masked_pairs / masked_flop_rate
        + small_rows[rows]                      (rows = tokens through the GEMMs, 1..len)

Structure (bytes and FLOPs per token, per pair, per row of the LM head) comes from the
model's shape; only the rates and overheads are fitted. The layers' GEMMs see every
token, the LM head only the rows that sample (every decode, and one row per prefill
sequence: a calibration chunk ends its prompt, as most chunks do). How streaming the
weights and computing the rows combine is the `combine` choice:
- "max": they overlap, a GEMM is bound by the slower (the roofline; flat while memory
  bound, then linear). The fit finds the bandwidth from where the bend falls (on this
  project's CPU, ~9 rows for batchlab-small);
- "sum": they do not overlap. The weight read is then a constant per step, which
  timings of one model cannot tell apart from the fixed overhead: calibration pins it
  to the read bandwidth it measured.
small_rows corrects tiny GEMMs, whose CPU kernels are chosen per row count and miss
the roofline (fitted with zero sum over the row counts measured; absent: no correction).

after_prefill and after_idle (0/1, core/features.py) price the context of a step that
a warm sweep never sees: calibration learns them from steps timed as serving meets them
(calibration/sweep/serve_phase.py) or from served runs (--from-run). Profiles written before
they existed price them at 0.

steady_s prices a steady decode step (decode-only, neither after a prefill nor after an
idle gap: the step before it was a decode too) against the sweep's, whose every timing
follows some other shape: served steady decodes run cheaper than the sweep timed them
while prefill-bearing steps run at its level (docs/results/2026-12-01-calibration-serving.md).
Serving fits it (calibration/fit/served_steps.py): a fixed change, negative where the weights
still warm from the step before save time. 0: priced as the sweep timed it.

masked_pairs (core/features.py) are the pairs a chunk's attention computes beyond its
causal ones, which a kernel that works on whole tiles (torch's CPU SDPA) pays for at
about the attention rate and a finer causal one skips. The sweep fits their own rate
(chunks after 0, 256 and 1024 cached tokens tell the two apart); profiles fitted before
price them at 0.

The expression is linear in kv_tokens_read and attention_pairs, so a steady decode run
is vectorised with the same arithmetic, in the same order, as step_time."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from batchlab.core.cost.form import FormDefaults
from batchlab.core.features import StepFeatures
from batchlab.core.model.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class Shape:
    """What one step moves and computes, from the model's architecture."""
    layer_weight_bytes: float  # every decoder layer + final norm
    head_weight_bytes: float  # the LM head
    layer_flops_per_token: float
    head_flops_per_row: float
    kv_bytes_per_token: float  # full-attention layers
    attn_flops_per_pair: float
    # A mixture of experts (core/cost/deployment.py): all routed experts' bytes, read as
    # far as a step's tokens touch them (1 - (1 - touch)^tokens of them); layer_weight_bytes
    # and layer_flops_per_token are then the rest and the active FLOPs.
    expert_weight_bytes: float = 0.0
    expert_touch: float = 0.0  # k / E
    # Sliding-window layers, priced by the windowed step features.
    window_kv_bytes_per_token: float = 0.0
    window_attn_flops_per_pair: float = 0.0

    @classmethod
    def of(cls, spec: ModelSpec) -> "Shape":
        head = spec.vocab_size * spec.hidden_size
        layers = spec.params_read_per_step - head
        experts = touch = 0.0
        flops = 2.0 * layers
        if spec.is_moe:
            layers = spec.non_expert_params
            experts = spec.expert_params_total * spec.expert_bytes_per_weight
            touch = spec.experts_per_token / spec.num_experts
            flops = 2.0 * (spec.active_params - head)
        kv, attn = spec.kv_bytes_per_token_layer, spec.attention_flops_per_pair_layer
        return cls(layers * spec.dtype_bytes, head * spec.dtype_bytes, flops, 2.0 * head,
                   float(spec.full_layers * kv), float(spec.full_layers * attn), experts, touch,
                   float(spec.windowed_layers * kv), float(spec.windowed_layers * attn))

    def layer_weights(self, tokens):
        """Weight bytes the decoder layers read for a step of `tokens` tokens."""
        if not self.expert_weight_bytes:
            return self.layer_weight_bytes
        return self.layer_weight_bytes + self.expert_weight_bytes * (1 - (1 - self.expert_touch) ** tokens)


# The fitted parameters, in the order calibration/fit/fitted_form.py solves for them. All are
# seconds per unit (inverse rates), so the form is linear in them apart from the max.
COMBINE = ("max", "sum")
PARAM_NAMES = ("overhead_s", "per_seq_s", "per_chunk_s", "s_per_weight_byte",
               "s_per_flop", "s_per_kv_byte", "s_per_attn_flop", "after_prefill_s", "after_idle_s",
               "s_per_masked_flop")


@dataclass(frozen=True, slots=True)
class FittedCostModel(FormDefaults):
    shape: Shape
    overhead_s: float
    per_seq_s: float
    per_chunk_s: float
    s_per_weight_byte: float  # 1 / effective memory bandwidth (weights)
    s_per_flop: float  # 1 / effective matmul FLOP rate
    s_per_kv_byte: float  # 1 / effective KV read bandwidth (gather + attention read)
    s_per_attn_flop: float  # 1 / effective attention FLOP rate
    small_rows: tuple[float, ...] = ()  # extra seconds for 1, 2, ... rows
    combine: str = "max"  # "max" | "sum": see the module docstring
    after_prefill_s: float = 0.0  # extra seconds of a step right after a prefill step
    after_idle_s: float = 0.0  # extra seconds of the first step after an idle gap
    s_per_masked_flop: float = 0.0  # 1 / effective rate of masked_pairs (computed, then masked)
    steady_s: float = 0.0  # a steady decode step's change against the sweep's price (either sign)

    def __post_init__(self) -> None:
        if self.combine not in COMBINE:
            raise ValueError(f"combine must be one of {COMBINE}, got {self.combine!r}")

    @property
    def params(self) -> tuple[float, ...]:
        return tuple(getattr(self, n) for n in PARAM_NAMES)

    def _time(self, seqs, prefill_seqs, tokens, sampled, kv, pairs, after_prefill=0, after_idle=0,
              masked=0, steady=False, w_kv=0, w_pairs=0):
        """The one expression; kv and pairs may be numpy arrays (a decode run), the
        rest are scalars, and the operation order is the same either way."""
        sh = self.shape
        w = self.s_per_weight_byte
        join = max if self.combine == "max" else _add
        layers = join(sh.layer_weights(tokens) * w, sh.layer_flops_per_token * tokens * self.s_per_flop)
        head = join(sh.head_weight_bytes * w, sh.head_flops_per_row * sampled * self.s_per_flop)
        t = self.overhead_s + self.per_seq_s * seqs + self.per_chunk_s * prefill_seqs
        t = t + self.after_prefill_s * after_prefill + self.after_idle_s * after_idle
        t = t + layers + head
        t = t + sh.kv_bytes_per_token * kv * self.s_per_kv_byte
        t = t + sh.attn_flops_per_pair * pairs * self.s_per_attn_flop
        if sh.window_kv_bytes_per_token:
            t = t + sh.window_kv_bytes_per_token * w_kv * self.s_per_kv_byte
            t = t + sh.window_attn_flops_per_pair * w_pairs * self.s_per_attn_flop
        if masked:
            t = t + sh.attn_flops_per_pair * masked * self.s_per_masked_flop
        if 0 < tokens <= len(self.small_rows):
            t = t + self.small_rows[tokens - 1]
        if steady:
            t = t + self.steady_s
        return t

    def step_time(self, f: StepFeatures) -> float:
        if f.num_seqs == 0:
            return 0.0
        tokens = f.prefill_tokens + f.decode_tokens
        return float(self._time(f.num_seqs, f.num_prefill_seqs, tokens,
                                f.decode_tokens + f.num_prefill_seqs, f.kv_tokens_read,
                                f.attention_pairs, f.after_prefill, f.after_idle, f.masked_pairs,
                                is_steady(f), f.window_kv_tokens_read, f.window_attention_pairs))

    def parts(self, f: StepFeatures) -> tuple[float, float]:
        """step_time(f) without its context terms (after_prefill, after_idle, steady),
        split in two: (fixed costs and memory traffic, compute). With "max", each GEMM's
        time goes to whichever side bounds it. Serving refits the two levels separately
        (calibration/fit/served_steps.py)."""
        if f.num_seqs == 0:
            return 0.0, 0.0
        sh, w, sf = self.shape, self.s_per_weight_byte, self.s_per_flop
        tokens = f.prefill_tokens + f.decode_tokens
        sampled = f.decode_tokens + f.num_prefill_seqs
        mem = self.overhead_s + self.per_seq_s * f.num_seqs + self.per_chunk_s * f.num_prefill_seqs
        mem += sh.kv_bytes_per_token * f.kv_tokens_read * self.s_per_kv_byte
        mem += sh.window_kv_bytes_per_token * f.window_kv_tokens_read * self.s_per_kv_byte
        if 0 < tokens <= len(self.small_rows):
            mem += self.small_rows[tokens - 1]
        comp = sh.attn_flops_per_pair * f.attention_pairs * self.s_per_attn_flop
        comp += sh.window_attn_flops_per_pair * f.window_attention_pairs * self.s_per_attn_flop
        comp += sh.attn_flops_per_pair * f.masked_pairs * self.s_per_masked_flop
        for weights, flops in ((sh.layer_weights(tokens) * w, sh.layer_flops_per_token * tokens * sf),
                               (sh.head_weight_bytes * w, sh.head_flops_per_row * sampled * sf)):
            if self.combine == "sum":
                mem, comp = mem + weights, comp + flops
            elif weights >= flops:
                mem += weights
            else:
                comp += flops
        return mem, comp

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        """step_time of m decode steps: kv and pairs grow by num_seqs a step; the context
        features (after_prefill, after_idle) are the first step's only, the later ones are
        steady."""
        if f.num_seqs == 0:
            return np.zeros(m)
        grow = np.arange(m, dtype=np.int64) * f.num_seqs
        tokens = f.prefill_tokens + f.decode_tokens
        # Windowed counts grow like the full ones (exact for a window-free shape, which
        # does not read them; the simulator prices windowed runs by window_decode_times).
        t = self._time(f.num_seqs, f.num_prefill_seqs, tokens, f.decode_tokens + f.num_prefill_seqs,
                       f.kv_tokens_read + grow, f.attention_pairs + grow, masked=f.masked_pairs,
                       steady=True, w_kv=f.window_kv_tokens_read + grow,
                       w_pairs=f.window_attention_pairs + grow)
        t = np.array(t, dtype=float)
        if m and not is_steady(f):
            t[0] = self.step_time(f)
        return t

    def at_speed(self, memory: float, compute: float | None = None) -> "FittedCostModel":
        """The profile as the machine ran at measured speeds: its memory side (fixed costs,
        weight and KV traffic) x `memory`, its FLOP terms x `compute` (None: as profiled).
        Serving's refit (calibration/fit/served_steps.py) levels the two sides the same way."""
        return self.scaled(bandwidth=1.0 / memory, flops=1.0 / (compute or 1.0), overhead=memory)

    # -- the fitted terms as hardware figures -------------------------------------------
    @property
    def mem_bandwidth(self) -> float:
        """Effective bytes/s streaming the weights."""
        return 1.0 / self.s_per_weight_byte if self.s_per_weight_byte > 0 else float("inf")

    @property
    def flop_rate(self) -> float:
        """Effective matmul FLOP/s."""
        return 1.0 / self.s_per_flop if self.s_per_flop > 0 else float("inf")

    @property
    def kv_bandwidth(self) -> float:
        return 1.0 / self.s_per_kv_byte if self.s_per_kv_byte > 0 else float("inf")

    @property
    def attn_flop_rate(self) -> float:
        return 1.0 / self.s_per_attn_flop if self.s_per_attn_flop > 0 else float("inf")

    def scaled(self, bandwidth: float = 1.0, flops: float = 1.0, overhead: float = 1.0) -> "FittedCostModel":
        """What-if on other hardware: bandwidths x `bandwidth`, FLOP rates x `flops`,
        fixed costs x `overhead`."""
        return FittedCostModel(
            self.shape, self.overhead_s * overhead, self.per_seq_s * overhead,
            self.per_chunk_s * overhead, self.s_per_weight_byte / bandwidth, self.s_per_flop / flops,
            self.s_per_kv_byte / bandwidth, self.s_per_attn_flop / flops,
            tuple(x * overhead for x in self.small_rows), self.combine,
            self.after_prefill_s * overhead, self.after_idle_s * overhead,
            self.s_per_masked_flop / flops, self.steady_s * overhead)

    def with_terms(self, per_chunk_s: float, per_seq_s: float, after_prefill_s: float,
                   after_idle_s: float, steady_s: float) -> "FittedCostModel":
        """The serving refit's terms set (calibration/fit/served_steps.py refine; core/cost/cpu_form.py
        has the same)."""
        return replace(self, per_chunk_s=per_chunk_s, per_seq_s=per_seq_s, after_prefill_s=after_prefill_s,
                       after_idle_s=after_idle_s, steady_s=steady_s)

    def swept(self) -> "FittedCostModel":
        """The model as the sweep timed steps: without the steady-decode term (a sweep
        point follows some other shape, never a decode of its own)."""
        return replace(self, steady_s=0.0)


def is_steady(f: StepFeatures) -> bool:
    """A decode-only step right after another decode step of the same engine."""
    return f.prefill_tokens == 0 and not f.after_prefill and not f.after_idle


def _add(a: float, b: float) -> float:
    return a + b
