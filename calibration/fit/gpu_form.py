"""Fit the GPU form with the CPU extras (core/cost/cpu_form.py) to a sweep's step medians: least
squares on log times (every step's relative error weighs alike), standard errors from the
Jacobian at the optimum, as calibration/operators/from_steps.py refits GPU steps.

Fitted: the GPU form's efficiencies over the measured read bandwidth and matmul rate, the
ridge's k, the per-step and per-sequence costs (FITTED_GPU), and the extras whose feature
some training step has (a chunk's cost, masked pairs' share, the context terms; steady_s
is serving's, calibration/fit/served_steps.py) and the small-row corrections, constrained to sum
to zero over the row counts measured (they shape the plateau; its level stays with the
rest, as calibration/fit/fitted_form.py argues). The fit starts from a few ridge sharpnesses and keeps
the best. Where the ridge fits to a sum (k ~ 1) the weight read is a constant per step that
one model's steps cannot tell from step_s (the fitted form's "sum" case): mem_efficiency is
then pinned to 1 (the measured read bandwidth) unless freeing it lowers the training error
by PIN_MARGIN."""
from __future__ import annotations

from typing import NamedTuple
from collections.abc import Sequence

import numpy as np
from scipy.optimize import least_squares

from batchlab.calibration.fit.fitted_form import SMALL_ROWS, quality
from batchlab.core.cost.cpu_form import cpu_form, cpu_gpu_params, CpuExtras, CpuFormModel, FITTED_GPU
from batchlab.core.features import StepFeatures
from batchlab.core.cost.profile import FitQuality, Measurement
from batchlab.core.model.spec import ModelSpec

EXTRAS = ("chunk_s", "masked_pair_share", "after_prefill_s", "after_idle_s")
# Start and bounds per constant: efficiencies as fractions of the measured figures (a CPU
# kernel may beat the reference kernel), k between a sum and a near max, seconds.
START = {"mem_efficiency": 0.8, "compute_efficiency": 0.8, "ridge_k": 3.0, "attn_kv_efficiency": 0.3,
         "attn_pair_efficiency": 0.3, "step_s": 1e-3, "seq_s": 1e-4, "chunk_s": 1e-4,
         "masked_pair_share": 0.5, "after_prefill_s": 1e-4, "after_idle_s": 1e-4}
BOUNDS = {"mem_efficiency": (1e-3, 20.0), "compute_efficiency": (1e-3, 20.0), "ridge_k": (1.0, 40.0),
          "attn_kv_efficiency": (1e-4, 20.0), "attn_pair_efficiency": (1e-4, 20.0), "step_s": (0.0, 10.0),
          "seq_s": (0.0, 1.0), "chunk_s": (0.0, 1.0), "masked_pair_share": (0.0, 10.0),
          "after_prefill_s": (0.0, 1.0), "after_idle_s": (0.0, 1.0)}
RIDGE_STARTS = (1.5, 3.0, 10.0)
PIN_MARGIN = 0.02  # relative rms gain a free mem_efficiency needs over the pinned one
PINNED_MEM = {"mem_efficiency": 1.0}
SUM_K = 1.05  # a fitted ridge_k below this is a sum
FLOOR_S = 1e-9  # a price below this is a non-physical trial point: its log is taken here


class CpuFormFit(NamedTuple):
    model: CpuFormModel
    values: dict[str, float]  # every fitted constant (small rows as small_rows_N)
    stderr: dict[str, float]
    pinned: dict[str, float]  # constants the fit held (mem_efficiency where not separable)
    rms_log: float  # on the training steps
    quality: FitQuality


def _present(feats: Sequence[StepFeatures]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The extras some step has a feature for, and the small row counts measured."""
    has = {"chunk_s": any(f.num_prefill_seqs for f in feats), "masked_pair_share": any(f.masked_pairs for f in feats),
           "after_prefill_s": any(f.after_prefill for f in feats), "after_idle_s": any(f.after_idle for f in feats)}
    rows = sorted({f.prefill_tokens + f.decode_tokens for f in feats} & set(range(1, SMALL_ROWS + 1)))
    return tuple(n for n in EXTRAS if has[n]), tuple(rows)


def build(spec: ModelSpec, read_bandwidth: float, matmul_flops: float, names: Sequence[str],
          x: Sequence[float], rows: tuple[int, ...], pinned: dict[str, float] | None = None) -> CpuFormModel:
    """The model at constants x (named `names`, then rows[:-1]'s corrections), `pinned` held."""
    v = {**(pinned or {}), **dict(zip(names, map(float, x)))}
    small = [0.0] * (max(rows) if rows else 0)
    corr = [float(c) for c in x[len(names):]]
    for r, c in zip(rows[:-1], corr):
        small[r - 1] = c
    if rows:
        small[rows[-1] - 1] = -sum(corr)
    extras = CpuExtras(**{n: v[n] for n in EXTRAS if n in v}, small_rows=tuple(small))
    return cpu_form(spec, cpu_gpu_params(v), read_bandwidth, matmul_flops, extras)


def _stderr(jac: np.ndarray, resid: np.ndarray) -> np.ndarray:
    """Standard errors from J at the optimum, residuals taken as independent (a lower bound)."""
    dof = max(len(resid) - jac.shape[1], 1)
    cov = np.linalg.pinv(jac.T @ jac) * float(resid @ resid) / dof
    return np.sqrt(np.clip(np.diag(cov), 0, None))


def fit_cpu_form(spec: ModelSpec, ms: Sequence[Measurement], read_bandwidth: float,
                 matmul_flops: float, spread: float | None = None) -> CpuFormFit:
    """Fit on the measurements not held out; judge on all (fitted_form.py quality).
    ValueError (one line) for too few points, a non-positive time or measured figure."""
    train = [m for m in ms if not m.heldout]
    feats = [StepFeatures(**m.features) for m in train]
    y = np.array([m.median_s for m in train], dtype=float)
    bad = next((m for m in ms if not (np.isfinite(m.median_s) and m.median_s > 0)), None)
    if bad is not None:
        raise ValueError(f"measurement {bad.point}: median_s {bad.median_s!r}: a measured step time is "
                         f"not positive and finite")
    extras, rows = _present(feats)
    names = FITTED_GPU + extras
    n_params = len(names) + max(0, len(rows) - 1)
    if len(train) <= n_params:
        raise ValueError(f"{len(train)} measured points to fit {n_params} constants: measure more")
    cpu_form(spec, cpu_gpu_params(START), read_bandwidth, matmul_flops)  # bad figures: ValueError now
    logy = np.log(y)
    free = _solve(spec, read_bandwidth, matmul_flops, names, rows, feats, logy, {})
    best, pinned = free, {}
    if free.x[names.index("ridge_k")] < SUM_K:  # a sum: is the weight read told from step_s?
        held = _solve(spec, read_bandwidth, matmul_flops, tuple(n for n in names if n not in PINNED_MEM),
                      rows, feats, logy, PINNED_MEM)
        if _rms(free) >= _rms(held) * (1 - PIN_MARGIN):
            best, pinned = held, PINNED_MEM
    names = tuple(n for n in names if n not in pinned)
    se = _stderr(best.jac, best.fun)
    labels = list(names) + [f"small_rows_{r}" for r in rows[:-1]]
    model = build(spec, read_bandwidth, matmul_flops, names, best.x, rows, pinned)
    return CpuFormFit(model, dict(zip(labels, map(float, best.x))), dict(zip(labels, map(float, se))),
                      dict(pinned), _rms(best), quality(model, list(ms), spread))


def _rms(res) -> float:
    return float(np.sqrt(np.mean(res.fun ** 2)))


def _solve(spec: ModelSpec, read_bandwidth: float, matmul_flops: float, names: tuple[str, ...],
           rows: tuple[int, ...], feats: list[StepFeatures], logy: np.ndarray, pinned: dict[str, float]):
    """scipy's least_squares result on log times from each ridge start, the best kept."""
    def resid(x):
        m = build(spec, read_bandwidth, matmul_flops, names, x, rows, pinned)
        return np.log(np.maximum([m.step_time(f) for f in feats], FLOOR_S)) - logy

    start = dict(START, step_s=float(np.exp(logy.min())) / 2)
    n_rows = len(rows) - 1 if rows else 0
    lo = [BOUNDS[n][0] for n in names] + [-1.0] * n_rows
    hi = [BOUNDS[n][1] for n in names] + [1.0] * n_rows
    scale = [max(start[n], 1e-6) for n in names] + [1e-4] * n_rows
    best = None
    for k in RIDGE_STARTS:
        x0 = [k if n == "ridge_k" else start[n] for n in names] + [0.0] * n_rows
        res = least_squares(resid, x0, bounds=(lo, hi), x_scale=scale, method="trf")
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None
    return best
