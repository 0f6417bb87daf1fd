"""Cost models: step features -> seconds. The simulator prices every step with one;
calibration fits the linear form to measured backend steps."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import numpy as np
from mypy_extensions import mypyc_attr

from batchlab.core.features import FEATURE_NAMES, StepFeatures
from batchlab.core.layout import Layout
from batchlab.core.specs import HardwareSpec, ModelSpec


class CostModel(Protocol):
    """Everything the simulator asks of a price (sim/engine.py, core/fast_forward.py)."""

    def step_time(self, f: StepFeatures) -> float:
        """Seconds of one step of shape f."""

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        """step_time of m steady decode steps starting with f: kv_tokens_read and
        attention_pairs grow by num_seqs a step; f's context features (after_prefill,
        after_idle) are its own, the later steps follow a decode. Bit for bit equal to
        step_time, step by step (the fast-forward relies on it)."""

    def decode_times(self, n: int, kv0: int, m: int) -> list[float]:
        """step_time of m decode-only steps of n sequences reading kv0, kv0 + n, ... KV
        tokens, in whichever form is cheapest for m (stretch_times is the usual one)."""

    def at(self, now: float) -> "CostModel":
        """The price of a step (or a fast-forwarded run) starting at `now` on the run's
        clock: itself, unless its level moves with the clock (core/cost_at_speed.py)."""


class CostForm(CostModel, Protocol):
    """A concrete cost form (roofline, linear, fitted): what a CostAtSpeed wraps."""

    def at_speed(self, memory: float, compute: float | None = None) -> CostModel:
        """This form as the machine ran at measured speeds: its memory side (fixed costs,
        weight and KV traffic) `memory` times as slow, its compute side `compute` times
        (None: as priced). How the two sides split is the form's own business."""


# Stretches of decode steps shorter than this are priced step by step, longer ones by
# one numpy call (decode_run_times), which costs more to set up.
SHORT_STEPS = 6


def stretch_times(cost: CostModel, n: int, kv0: int, m: int) -> list[float]:
    """`cost`'s decode_times: step by step when the stretch is short, else vectorised."""
    if m < SHORT_STEPS:
        return [cost.step_time(StepFeatures(n, 0, 0, n, kv, kv)) for kv in range(kv0, kv0 + m * n, n)]
    return cost.decode_run_times(StepFeatures(n, 0, 0, n, kv0, kv0), m).tolist()


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (setup.py): other forms extend it
class FormDefaults:
    """The CostModel methods most forms share: decode stretches priced by stretch_times,
    one level whatever the clock (at: itself), and at a measured speed every step slowed
    as a whole (at_speed: Slowed). A form overrides what it does otherwise."""
    __slots__ = ()

    def decode_times(self, n: int, kv0: int, m: int) -> list[float]:
        return stretch_times(cast(CostModel, self), n, kv0, m)

    def at(self, now: float) -> CostModel:
        return cast(CostModel, self)

    def at_speed(self, memory: float, compute: float | None = None) -> CostModel:
        return Slowed(cast(CostModel, self), memory)


@dataclass(frozen=True, slots=True)
class Slowed(FormDefaults):
    """Every step of `base` `factor` times as long: a cost form at a measured speed where
    the form does not split its memory and compute sides for the measurement (roofline,
    linear: experiments/machine_speed.py measures a compute side on a fitted profile's FLOP
    terms only)."""
    base: CostModel
    factor: float

    def step_time(self, f: StepFeatures) -> float:
        return self.base.step_time(f) * self.factor

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        return self.base.decode_run_times(f, m) * self.factor


# A roofline prices decode stretches shorter than this in plain Python (decode_times).
SHORT_PLAIN = 48


@dataclass(frozen=True, slots=True)
class RooflineCostModel(FormDefaults):
    """overhead + max(bytes moved / bandwidth, FLOPs / peak) + tensor-parallel all-reduce.

    Bytes: the weights once per step (they are shared by every sequence in the batch:
    the whole point of batching) plus every KV slot attention reads. All figures are
    per GPU; bandwidth and peak are already scaled by achievable efficiency. At a measured
    speed the whole step is slowed (FormDefaults.at_speed): the measured compute side is a
    fitted profile's FLOP terms."""

    weight_bytes: float
    kv_bytes_per_token: float
    flops_per_token: float
    attention_flops_per_pair: float
    mem_bandwidth: float
    peak_flops: float
    overhead_s: float = 0.0
    comm_bytes_per_token: float = 0.0  # all-reduce traffic per token per GPU
    comm_bandwidth: float = 1.0
    comm_latency_s: float = 0.0  # per step, all layers together

    def step_time(self, f: StepFeatures) -> float:
        tokens = f.prefill_tokens + f.decode_tokens
        t_mem = (self.weight_bytes + self.kv_bytes_per_token * f.kv_tokens_read) / self.mem_bandwidth
        t_flops = (self.flops_per_token * tokens
                   + self.attention_flops_per_pair * f.attention_pairs) / self.peak_flops
        t_comm = 0.0
        if self.comm_bytes_per_token:
            t_comm = self.comm_latency_s + self.comm_bytes_per_token * tokens / self.comm_bandwidth
        return self.overhead_s + max(t_mem, t_flops) + t_comm

    def decode_times(self, n: int, kv0: int, m: int) -> list[float]:
        """step_time of m decode-only steps of n sequences reading kv0, kv0 + n, ... KV
        tokens: below SHORT_PLAIN steps the same arithmetic in plain Python, cheaper than
        numpy for short runs; from there decode_run_times."""
        if m >= SHORT_PLAIN:
            return self.decode_run_times(StepFeatures(n, 0, 0, n, kv0, kv0), m).tolist()
        w, kvb, bw = self.weight_bytes, self.kv_bytes_per_token, self.mem_bandwidth
        flops, afp, peak = self.flops_per_token * n, self.attention_flops_per_pair, self.peak_flops
        t_comm = 0.0
        if self.comm_bytes_per_token:
            t_comm = self.comm_latency_s + self.comm_bytes_per_token * n / self.comm_bandwidth
        o = self.overhead_s
        out: list[float] = []
        for j in range(m):  # a for statement: compiled, a comprehension's range is a Python call
            kv = kv0 + j * n
            out.append(o + max((w + kvb * kv) / bw, (flops + afp * kv) / peak) + t_comm)
        return out

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        """step_time of m steady decode steps, vectorised with the same arithmetic."""
        kv, pairs = _growing(f, m)
        tokens = f.prefill_tokens + f.decode_tokens
        t_mem = (self.weight_bytes + self.kv_bytes_per_token * kv) / self.mem_bandwidth
        t_flops = (self.flops_per_token * tokens
                   + self.attention_flops_per_pair * pairs) / self.peak_flops
        t_comm = 0.0
        if self.comm_bytes_per_token:
            t_comm = self.comm_latency_s + self.comm_bytes_per_token * tokens / self.comm_bandwidth
        return self.overhead_s + np.maximum(t_mem, t_flops) + t_comm


def attention_window(cost: CostModel) -> int:
    """The sliding window of the model `cost` prices (0: none), through any wrappers
    (CostAtSpeed, Slowed: their `base`): the simulator computes the windowed step
    features with it."""
    wrapped: object = cost
    while wrapped is not None:
        window = getattr(wrapped, "window", 0)
        if window:
            return window
        wrapped = getattr(wrapped, "base", None)
    return 0


def _growing(f: StepFeatures, m: int) -> tuple[np.ndarray, np.ndarray]:
    """kv_tokens_read and attention_pairs of m steady decode steps: each of the
    num_seqs sequences attends one more token per step."""
    grow = np.arange(m, dtype=np.int64) * f.num_seqs
    return f.kv_tokens_read + grow, f.attention_pairs + grow


def kv_shards(model: ModelSpec, tensor_parallel: int) -> int:
    """Over how many GPUs the KV heads are split: tp, or the KV head count when tp
    exceeds it (each GPU then holds a replica of one KV head, as vLLM does). A tp that
    splits a head is an error."""
    tp, heads, kv = tensor_parallel, model.num_heads, model.num_kv_heads
    if heads % tp or (kv % tp and tp % kv):
        raise ValueError(f"tensor_parallel={tp} does not split {model.name}'s {heads} attention "
                         f"heads and {kv} KV heads evenly")
    return min(tp, kv)


def allreduces_per_step(model: ModelSpec, tensor_parallel: int) -> int:
    """Megatron-style TP: one all-reduce after attention, one after the MLP, per layer."""
    return 2 * model.num_layers if tensor_parallel > 1 else 0


def is_plain(model: ModelSpec, layout: Layout) -> bool:
    """A dense model without windows or latent attention on TP alone: the form and KV
    capacity batchlab has always priced (RooflineCostModel), unchanged."""
    return layout.is_plain_tp and not (model.is_moe or model.is_mla or model.layer_windows)


def roofline(model: ModelSpec, hw: HardwareSpec, tensor_parallel: int = 1,
             mem_efficiency: float = 1.0, compute_efficiency: float = 1.0,
             overhead_s: float = 0.0, allreduce_latency_s: float | None = None,
             layout: Layout | None = None) -> CostForm:
    """The model's dtypes are its bytes (with_dtypes): weights of 1 byte are fp8 and run
    at the GPU's fp8 peak (an error where it has none); attention runs at the 16-bit
    peak whatever the KV cache stores. allreduce_latency_s: None is the preset's.
    layout: TP, PP, EP and DP attention (default: TP tensor_parallel alone); a MoE,
    MLA or windowed model, or a layout beyond TP, is priced by core/deployment_cost.py."""
    layout = layout or Layout(tp=tensor_parallel)
    peak = hw.flops_for("fp8" if model.dtype_bytes == 1 else "bf16")
    # mxfp4 experts (gpt-oss) are read at their 4.25 bits and multiplied at the weights'
    # 16-bit peak, as engines dequantise them on GPUs without fp4 tensor cores.
    if not is_plain(model, layout):
        from batchlab.core.deployment_cost import deployment_roofline
        return deployment_roofline(model, hw, layout, mem_efficiency, compute_efficiency,
                                   overhead_s, allreduce_latency_s, peak)
    tp = tensor_parallel
    shards = kv_shards(model, tp)
    comm_bytes = comm_latency = 0.0
    if tp > 1:
        # Each all-reduce sums the hidden state of every token; a ring moves 2(tp-1)/tp of it.
        n = allreduces_per_step(model, tp)
        comm_bytes = n * model.hidden_size * model.activation_bytes * 2 * (tp - 1) / tp
        latency = hw.allreduce_latency_s if allreduce_latency_s is None else allreduce_latency_s
        comm_latency = n * latency
        if hw.interconnect_bandwidth <= 0:
            raise ValueError(f"hardware {hw.name!r} has no interconnect_bandwidth for tensor_parallel={tp}")
    return RooflineCostModel(
        weight_bytes=model.params_read_per_step * model.dtype_bytes / tp,
        kv_bytes_per_token=model.kv_bytes_per_token / shards,  # each GPU reads its share
        flops_per_token=model.flops_per_token / tp,
        # One peak prices all FLOPs: attention's are scaled to what they cost at 16 bits.
        attention_flops_per_pair=model.attention_flops_per_pair / tp * peak / hw.peak_flops,
        mem_bandwidth=hw.mem_bandwidth * mem_efficiency,
        peak_flops=peak * compute_efficiency,
        overhead_s=overhead_s,
        comm_bytes_per_token=comm_bytes,
        comm_bandwidth=hw.interconnect_bandwidth or 1.0,
        comm_latency_s=comm_latency,
    )


def kv_capacity_blocks(model: ModelSpec, hw: HardwareSpec, tensor_parallel: int,
                       block_size: int, memory_utilization: float = 0.9,
                       layout: Layout | None = None, max_num_seqs: int = 256) -> int:
    """KV blocks that fit in the memory left after weights (vLLM's
    gpu_memory_utilization: the rest is headroom for activations and the runtime). A
    MoE, MLA or windowed model, or a layout beyond TP: core/deployment_cost.py."""
    layout = layout or Layout(tp=tensor_parallel)
    if not is_plain(model, layout):
        from batchlab.core.deployment_cost import deployment_kv_blocks
        return deployment_kv_blocks(model, hw, layout, block_size, memory_utilization, max_num_seqs)
    free = hw.memory_bytes * tensor_parallel * memory_utilization - model.weight_bytes
    # Replicated KV heads (tp above the KV head count) store each token tp/shards times.
    per_token = model.kv_bytes_per_token * tensor_parallel / kv_shards(model, tensor_parallel)
    blocks = int(free // (per_token * block_size))
    if blocks < 1 and free > 0:  # memory is left, but not a block's worth
        raise ValueError(f"a KV block of {block_size:,} tokens (block_size) takes "
                         f"{per_token * block_size / 2**30:.3g} GiB of {model.name}'s KV; "
                         f"{tensor_parallel} x {hw.name} leaves {free / 2**30:.1f} GiB after "
                         f"the weights: give a smaller block size")
    if blocks < 1:
        need = model.weight_bytes / 2**30
        have = hw.memory_bytes * tensor_parallel * memory_utilization / 2**30
        raise ValueError(f"model {model.name} ({need:.1f} GiB of weights) leaves no KV memory on "
                         f"{tensor_parallel} x {hw.name} ({have:.1f} GiB usable)")
    return blocks


@dataclass(frozen=True, slots=True)
class LinearCostModel(FormDefaults):
    """intercept + sum(coef[name] * feature[name]) over FEATURE_NAMES (missing = 0); at a
    measured speed the whole step is slowed (it does not split the two sides)."""

    intercept: float
    coef: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.coef) - set(FEATURE_NAMES)
        if unknown:
            raise ValueError(f"unknown cost features {sorted(unknown)}; expected {FEATURE_NAMES}")

    def step_time(self, f: StepFeatures) -> float:
        return self.intercept + sum(c * getattr(f, n) for n, c in self.coef.items())

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        kv, pairs = _growing(f, m)
        grown = {"kv_tokens_read": kv, "attention_pairs": pairs}
        later = f._replace(after_prefill=0, after_idle=0)  # the context is the first step's
        total: Any = 0  # a number or an array (compiled: not checked as an int)
        for n, c in self.coef.items():
            total = total + c * grown.get(n, getattr(later, n))
        t = self.intercept + np.broadcast_to(total, (m,)).astype(float)
        if m and (f.after_prefill or f.after_idle):
            t[0] = self.step_time(f._replace(kv_tokens_read=int(kv[0]), attention_pairs=int(pairs[0])))
        return t
