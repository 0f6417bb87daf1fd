"""The CPU backend priced by the GPU form (docs/cost-form.md section 3): core/cost/gpu_form.py's
form, its "datasheet" the figures calibration measured on this machine (the read bandwidth
of a large tensor, the FLOP rate of a square matmul: calibration/sweep/timing.py), with the
CPU-specific terms the GPU form lacks priced ON TOP of it:

    t = gpu_form(f)                                    (core/cost/gpu_form.py, unchanged)
        + chunk_s * num_prefill_seqs                   (a chunk's own attention call and masks)
        + masked_pair_share * pair_price * masked_pairs  (torch's CPU SDPA computes whole tiles)
        + after_prefill_s * after_prefill + after_idle_s * after_idle
        + steady_s * steady                            (a steady decode against the sweep's)
        + small_rows[rows]                             (CPU GEMM kernels picked per row count)

pair_price is the GPU form's seconds per attention pair (every layer), so masked pairs cost
that share of a causal one. The extras are zero for a GPU profile; a CPU profile of
version 6 or later carries them (core/cost/profile.py). The constants whole steps of one model
cannot tell apart from the per-step cost (per-GEMM, per-layer, attention per layer, the
elementwise row floor) are pinned to 0 and carried by step_s (calibration/fit/gpu_form.py).

decode_run_times is the GPU form's own run plus scalar extras, so it equals step_time
along a run bit for bit whenever the GPU form's does."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from batchlab.core.cost.form import FormDefaults
from batchlab.core.features import StepFeatures
from batchlab.core.cost.fitted import is_steady
from batchlab.core.cost.dispatch import gpu_cost, operator_shapes
from batchlab.core.cost.gpu_form import AllReduce, GpuCostModel, GpuCostParams
from batchlab.core.model.spec import ModelSpec

# The GPU form's constants a CPU calibration fits on whole steps, and those it pins (not
# separable from step_s / seq_s on one model's steps, or not a CPU effect: no M tiles).
FITTED_GPU = ("mem_efficiency", "compute_efficiency", "ridge_k", "attn_kv_efficiency",
              "attn_pair_efficiency", "step_s", "seq_s")
PINNED_GPU = {"gemm_fixed_s": 0.0, "layer_fixed_s": 0.0, "attn_layer_s": 0.0, "attn_seq_s": 0.0,
              "elementwise_efficiency": 1.0,  # elementwise bytes at the measured read bandwidth
              "elementwise_row_efficiency": math.inf,  # no row floor of its own: step_s carries it
              "allreduce_scale": 1.0, "gemm_tile_tokens": 1.0}  # rows(T) = T: oneDNN has no M tiles
NO_ALLREDUCE = AllReduce({}, 0.0, 1.0)  # one CPU: no collectives


@dataclass(frozen=True, slots=True)
class CpuExtras:
    """The CPU terms on top of the GPU form (seconds, or a share of a causal pair)."""
    chunk_s: float = 0.0
    masked_pair_share: float = 0.0
    after_prefill_s: float = 0.0
    after_idle_s: float = 0.0
    steady_s: float = 0.0
    small_rows: tuple[float, ...] = ()  # extra seconds at 1, 2, ... rows through the GEMMs

    def scaled(self, memory: float) -> CpuExtras:
        """Fixed costs `memory` times as long (the masked share follows the pair price)."""
        return replace(self, chunk_s=self.chunk_s * memory, after_prefill_s=self.after_prefill_s * memory,
                       after_idle_s=self.after_idle_s * memory, steady_s=self.steady_s * memory,
                       small_rows=tuple(x * memory for x in self.small_rows))


NO_EXTRAS = CpuExtras()


def cpu_gpu_params(values: dict[str, float]) -> GpuCostParams:
    """GpuCostParams from the fitted constants (FITTED_GPU) and the pinned ones."""
    missing = set(FITTED_GPU) - set(values)
    if missing:
        raise ValueError(f"GPU-form constants missing: {', '.join(sorted(missing))}")
    return GpuCostParams(**{**PINNED_GPU, **{n: float(values[n]) for n in FITTED_GPU}})


@dataclass(frozen=True, slots=True)
class CpuFormModel(FormDefaults):
    """A CostForm: the GPU form for one device plus the CPU extras. Build with cpu_form()."""
    gpu: GpuCostModel
    extras: CpuExtras
    pair_s: float  # the GPU form's seconds per attention pair, every layer

    def _extra(self, f: StepFeatures, steady: bool) -> float:
        e = self.extras
        t = e.chunk_s * f.num_prefill_seqs + e.after_prefill_s * f.after_prefill + e.after_idle_s * f.after_idle
        t += e.masked_pair_share * self.pair_s * f.masked_pairs
        rows = f.prefill_tokens + f.decode_tokens
        if 0 < rows <= len(e.small_rows):
            t += e.small_rows[rows - 1]
        if steady:
            t += e.steady_s
        return t

    def step_time(self, f: StepFeatures) -> float:
        if f.num_seqs == 0:
            return 0.0
        return float(self.gpu.step_time(f) + self._extra(f, is_steady(f)))

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        """The GPU form's run plus the extras: the first step in f's context, the later
        ones steady (they follow a decode)."""
        if f.num_seqs == 0:
            return np.zeros(m)
        t = self.gpu.decode_run_times(f, m) + self._extra(f._replace(after_prefill=0, after_idle=0), True)
        if m and not is_steady(f):
            t[0] = self.step_time(f)
        return t

    def at_speed(self, memory: float, compute: float | None = None) -> CpuFormModel:
        """Fixed costs and bytes `memory` times as slow, FLOPs `compute` times (None: as
        priced, the CostForm contract and the fitted form's; GpuCostModel's None is `memory`)."""
        c = 1.0 if compute is None else compute
        return CpuFormModel(self.gpu.at_speed(memory, c), self.extras.scaled(memory), self.pair_s * c)

    def parts(self, f: StepFeatures, h: float = 1e-4) -> tuple[float, float]:
        """step_time(f) without its context terms, split in two: (fixed costs and memory
        traffic, compute). The GPU form is homogeneous of degree 1 in its two sides'
        times (smooth() is), so by Euler's theorem the compute side is the derivative of
        the price along the compute factor (a central difference) and the rest is the
        memory side; the two add up to the price. Serving refits the two levels
        (calibration/fit/served_steps.py)."""
        if f.num_seqs == 0:
            return 0.0, 0.0
        plain = f._replace(after_prefill=0, after_idle=0)
        t = self.swept().step_time(plain)
        comp = (self.at_speed(1.0, 1.0 + h).swept().step_time(plain)
                - self.at_speed(1.0, 1.0 - h).swept().step_time(plain)) / (2 * h)
        comp = min(max(comp, 0.0), t)  # rounding of a side ~0 must not leave it negative
        return t - comp, comp

    @property
    def per_chunk_s(self) -> float:
        return self.extras.chunk_s

    @property
    def per_seq_s(self) -> float:
        return self.gpu.params.seq_s

    @property
    def after_prefill_s(self) -> float:
        return self.extras.after_prefill_s

    @property
    def after_idle_s(self) -> float:
        return self.extras.after_idle_s

    @property
    def steady_s(self) -> float:
        return self.extras.steady_s

    def with_terms(self, per_chunk_s: float, per_seq_s: float, after_prefill_s: float,
                   after_idle_s: float, steady_s: float) -> CpuFormModel:
        """The serving refit's terms set (calibration/fit/served_steps.py refine)."""
        gpu = self.gpu
        params = replace(gpu.params, seq_s=per_seq_s)
        return CpuFormModel(gpu_cost(gpu.shapes, params, gpu.mem_bandwidth, gpu.peak_flops, gpu.peak_flops_16,
                                     gpu.allreduce),
                            replace(self.extras, chunk_s=per_chunk_s, after_prefill_s=after_prefill_s,
                                    after_idle_s=after_idle_s, steady_s=steady_s), self.pair_s)

    def swept(self) -> CpuFormModel:
        """As the sweep timed steps: without the steady-decode term."""
        return replace(self, extras=replace(self.extras, steady_s=0.0))

    @property
    def params(self) -> GpuCostParams:
        return self.gpu.params


def cpu_form(model: ModelSpec, params: GpuCostParams, read_bandwidth: float, matmul_flops: float,
             extras: CpuExtras = NO_EXTRAS) -> CpuFormModel:
    """`model` on one CPU whose measured read bandwidth (bytes/s) and matmul rate (FLOP/s)
    stand for the datasheet; attention's peak is the same matmul rate (fp32 throughout)."""
    if not (read_bandwidth > 0 and matmul_flops > 0 and math.isfinite(read_bandwidth)
            and math.isfinite(matmul_flops)):
        raise ValueError(f"measured read bandwidth {read_bandwidth!r} and matmul rate {matmul_flops!r} "
                         f"must be positive and finite")
    if model.is_moe or model.is_mla or model.windowed_layers:
        raise ValueError(f"model {model.name}: the GPU form's operator shapes cover dense full-attention "
                         f"models (experts, MLA and windows: issue 30); the fitted form prices it")
    shapes = operator_shapes(model, 1)
    gpu = gpu_cost(shapes, params, read_bandwidth, matmul_flops, matmul_flops, NO_ALLREDUCE)
    pair_s = shapes.layers * shapes.attn_flops_per_pair / (matmul_flops * params.attn_pair_efficiency)
    return CpuFormModel(gpu, extras, pair_s)


__all__ = ["CpuExtras", "CpuFormModel", "FITTED_GPU", "PINNED_GPU", "cpu_form", "cpu_gpu_params"]
