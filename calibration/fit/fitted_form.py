"""Fit the fitted form (core/cost/fitted.py FittedCostModel) to measured step times.

Given which side of each max() a point is on, the model is linear in its parameters
(all seconds per unit), so each fit is a bounded linear least-squares problem in
relative error (scipy lsq_linear: every rate >= 0; the small-row corrections may take
either sign), refined with a robust soft-L1 loss (scipy least_squares) so a point whose
repeats disagreed pulls less. The "max" form is solved for every crossover row count
the grid can distinguish, re-assigned until consistent, and the best kept. Both forms
are fitted; "max" (one more free rate) must beat "sum" by FORM_MARGIN in training error
to win. Held-out points (never seen by the fit) report how good it is, overall and per
region."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares, lsq_linear

from batchlab.core.batch import StepFeatures
from batchlab.core.cost.fitted import COMBINE, FittedCostModel, PARAM_NAMES, Shape
from batchlab.core.cost.profile import FitQuality, Measurement, RegionError

# Row counts 1..8 get their own correction: CPU GEMM kernels for a handful of rows are
# chosen per row count and do not follow the roofline (measured with oneDNN on
# batchlab-small: 2 rows ~12 ms slower than the roofline, 5-6 rows ~6 ms faster; MKL
# runs 1-3 rows as matrix-vector products). The corrections are constrained to sum to
# zero over the row counts measured: they shape the plateau, its level stays with the
# overhead and the weight read (unconstrained, they absorbed it and the fitted
# bandwidth wandered 14-25 GB/s between sweeps; constrained: 20.5-21.2, with equal or
# better held-out error). The grid must time every one of these row counts.
SMALL_ROWS = 8
ROBUST_SCALE = 0.05  # soft-L1 turns linear beyond 5% relative error
FORM_MARGIN = 0.02  # relative training-error gain the "max" form needs to be preferred
MAX_CUTS = 32  # crossover row counts tried by the "max" form
ROBUST_SEARCH_ROWS = 400  # above: the crossover is searched without the robust loss
_W, _F = PARAM_NAMES.index("s_per_weight_byte"), PARAM_NAMES.index("s_per_flop")


@dataclass
class FitResult:
    model: FittedCostModel
    quality: FitQuality
    train_mean_ape: dict[str, float]  # per form tried


def _rows(f: StepFeatures) -> tuple[int, int]:
    return f.prefill_tokens + f.decode_tokens, f.decode_tokens + f.num_prefill_seqs


def small_rows_present(feats: list[StepFeatures]) -> tuple[int, ...]:
    """Row counts 1..SMALL_ROWS that some step has: only those get a correction."""
    return tuple(sorted({_rows(f)[0] for f in feats if 0 < _rows(f)[0] <= SMALL_ROWS}))


def design(shape: Shape, feats: list[StepFeatures], combine: str, crossover: float,
           present: tuple[int, ...] = ()) -> np.ndarray:
    """Columns in PARAM_NAMES order, then the small-row corrections of `present[:-1]`
    (the last one is minus their sum). With combine="max", a GEMM group is weight-read
    bound where its weights' read time exceeds its FLOPs' at s_per_weight_byte /
    s_per_flop = `crossover` (for a dense model: below a row count)."""
    n = len(PARAM_NAMES)
    X = np.zeros((len(feats), n + max(0, len(present) - 1)))
    col = {r: n + i for i, r in enumerate(present[:-1])}
    for i, f in enumerate(feats):
        tokens, sampled = _rows(f)
        if combine == "sum":
            mem_l = mem_h = comp_l = comp_h = 1.0
        else:
            # crossover: the ratio of weight-read to FLOP time (s_per_weight_byte /
            # s_per_flop) a GEMM group turns compute-bound at: the LM head at a row count,
            # the layers at another where a MoE's weights read grow with the experts touched.
            mem_l = float(shape.layer_weights(tokens) * crossover > shape.layer_flops_per_token * tokens)
            mem_h = float(shape.head_weight_bytes * crossover > shape.head_flops_per_row * sampled)
            comp_l, comp_h = 1.0 - mem_l, 1.0 - mem_h
        X[i, :n] = (
            1.0, f.num_seqs, f.num_prefill_seqs,
            shape.layer_weights(tokens) * mem_l + shape.head_weight_bytes * mem_h,
            shape.layer_flops_per_token * tokens * comp_l + shape.head_flops_per_row * sampled * comp_h,
            shape.kv_bytes_per_token * f.kv_tokens_read
            + shape.window_kv_bytes_per_token * f.window_kv_tokens_read,
            shape.attn_flops_per_pair * f.attention_pairs
            + shape.window_attn_flops_per_pair * f.window_attention_pairs,
            f.after_prefill, f.after_idle, shape.attn_flops_per_pair * f.masked_pairs)
        if tokens in col:
            X[i, col[tokens]] = 1.0
        elif present and tokens == present[-1]:
            X[i, n:] = -1.0
    return X


def _solve(X: np.ndarray, y: np.ndarray, fixed: dict[int, float], robust: bool = True) -> np.ndarray:
    """min sum(((X theta - y) / y)^2), then soft-L1 refined (robust); theta[j] = fixed[j]
    for j in fixed; rates >= 0."""
    theta = np.zeros(X.shape[1])
    for j, v in fixed.items():
        theta[j] = v
    free = [j for j in range(X.shape[1]) if j not in fixed and np.any(X[:, j])]
    A = X[:, free] / y[:, None]
    b = 1.0 - (X[:, list(fixed)] @ np.array(list(fixed.values()))) / y if fixed else np.ones(len(y))
    scale = np.abs(A).max(axis=0)
    A = A / scale
    lo = np.array([-np.inf if j >= len(PARAM_NAMES) else 0.0 for j in free])
    x = np.maximum(lsq_linear(A, b, bounds=(lo, np.inf), method="bvls").x, lo)  # bvls may step a hair out
    if robust and len(y) > len(free):
        x = least_squares(lambda z: A @ z - b, x, jac=lambda z: A, bounds=(lo, np.inf),
                          loss="soft_l1", f_scale=ROBUST_SCALE, method="trf").x
    theta[free] = x / scale
    return theta


def to_model(shape: Shape, theta: np.ndarray, combine: str, present: tuple[int, ...] = ()) -> FittedCostModel:
    n = len(PARAM_NAMES)
    base = [max(0.0, float(v)) for v in theta[:n]]
    small = [0.0] * (max(present) if present else 0)
    for r, v in zip(present[:-1], theta[n:]):
        small[r - 1] = float(v)
    if present:
        small[present[-1] - 1] = -float(sum(theta[n:]))
    return FittedCostModel(shape, **dict(zip(PARAM_NAMES, base)), small_rows=tuple(small), combine=combine)


def ape(model: FittedCostModel, ms: list[Measurement]) -> np.ndarray:
    """Absolute percentage error per measurement."""
    pred = np.array([model.step_time(StepFeatures(**m.features)) for m in ms])
    meas = np.array([m.median_s for m in ms])
    return np.abs(pred - meas) / meas * 100


def _fit_form(shape: Shape, feats: list[StepFeatures], y: np.ndarray, combine: str,
              weight_s_per_byte: float | None, train: list[Measurement]) -> tuple[FittedCostModel, float]:
    present = small_rows_present(feats)
    if combine == "sum":
        # the weight read is a constant per step here: pinned, or folded into the overhead
        fixed = {_W: weight_s_per_byte or 0.0}
        m = to_model(shape, _solve(design(shape, feats, "sum", 0, present), y, fixed), "sum", present)
        return m, float(ape(m, train).mean())
    # Where each GEMM group flips to compute-bound, as a ratio of weight-read to FLOP
    # time; a cut between two neighbouring flips assigns every group a side. No cut below
    # the lowest: every GEMM compute-bound is the "sum" form with the weight read folded
    # into the overhead, which that form fits (and identifies) already.
    flips = sorted({shape.layer_flops_per_token * t / shape.layer_weights(t) for t, _ in map(_rows, feats)}
                   | {shape.head_flops_per_row * s / shape.head_weight_bytes for _, s in map(_rows, feats)})
    cuts = [(a + b) / 2 for a, b in zip(flips, flips[1:])] + [flips[-1] * 1.01]
    if len(cuts) > MAX_CUTS:  # served steps: hundreds of row counts; a spread of them will do
        cuts = sorted({cuts[int(i)] for i in np.linspace(0, len(cuts) - 1, MAX_CUTS)})
    # Many rows (served steps): search the cut by plain least squares, refine the best.
    robust = len(y) <= ROBUST_SEARCH_ROWS
    best: tuple[FittedCostModel, float, float] | None = None
    for cut in cuts:
        seen = set()
        while cut not in seen:  # re-assign sides until the fit agrees with them
            seen.add(cut)
            theta = _solve(design(shape, feats, "max", cut, present), y, {}, robust)
            m = to_model(shape, theta, "max", present)
            err = float(ape(m, train).mean())
            if best is None or err < best[1]:
                best = (m, err, cut)
            w, fl = theta[_W], theta[_F]
            implied = np.inf if fl <= 0 else w / fl
            cut = next((c for c in cuts if c >= implied), cuts[-1])
    assert best is not None
    if not robust:
        m = to_model(shape, _solve(design(shape, feats, "max", best[2], present), y, {}), "max", present)
        return m, float(ape(m, train).mean())
    return best[0], best[1]


def _region_error(errs: np.ndarray) -> RegionError:
    if errs.size == 0:
        return RegionError(n=0, median_ape=None, max_ape=None)
    return RegionError(n=int(errs.size), median_ape=round(float(np.median(errs)), 3),
                       max_ape=round(float(errs.max()), 3))


def quality(model: FittedCostModel, ms: list[Measurement], spread: float | None = None) -> FitQuality:
    train = [m for m in ms if not m.heldout]
    held = [m for m in ms if m.heldout]
    regions = {r: _region_error(ape(model, [m for m in held if m.region == r]))
               for r in ("decode", "prefill", "mixed")}
    return FitQuality(heldout=_region_error(ape(model, held)), train=_region_error(ape(model, train)),
                      regions=regions, spread_median_pct=None if spread is None else round(spread, 3))


def fit(shape: Shape, ms: list[Measurement], weight_s_per_byte: float | None = None,
        forms: tuple[str, ...] = COMBINE, spread: float | None = None) -> FitResult:
    """Fit on the measurements not held out; weight_s_per_byte pins the "sum" form's
    weight-read term (1 / measured read bandwidth)."""
    train = [m for m in ms if not m.heldout]
    n_params = len(PARAM_NAMES) + SMALL_ROWS
    if len(train) < len(PARAM_NAMES):
        raise ValueError(f"{len(train)} measured points to fit {n_params} parameters: measure more")
    feats = [StepFeatures(**m.features) for m in train]
    y = np.array([m.median_s for m in train])
    if not (y > 0).all():
        raise ValueError("a measured step time is not positive")
    tried = {c: _fit_form(shape, feats, y, c, weight_s_per_byte, train) for c in forms}
    combine = min(tried, key=lambda c: tried[c][1])
    if "sum" in tried and tried[combine][1] >= tried["sum"][1] * (1 - FORM_MARGIN) - 1e-6:
        combine = "sum"  # "max" has one more free rate: it must win clearly
    model = tried[combine][0]
    return FitResult(model, quality(model, ms, spread), {c: round(e, 3) for c, (_, e) in tried.items()})

