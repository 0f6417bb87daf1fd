"""Fitting the cost model to served steps, and judging it per step kind.

A served step is timed once, in its own context: a new prompt length, a chunk of any
size, right after a prefill or an idle gap. A sweep's warm medians fix the structure
(bandwidths, FLOP rates, small-row shape); what serving adds is priced by refine():

    t_served = scale * t_profile(f) + d_chunk * prefill_seqs
               + after_prefill_s * after_prefill + after_idle_s * after_idle

scale is the serving level against the sweep's (the same machine runs a served step
slower than a repeated one), d_chunk the fixed cost of a chunk of a shape the process
has not run (added to per_chunk_s), and the two context terms are new. It is a linear
least-squares problem, solved in relative error and then refined on the log ratio of
predicted to measured with a soft-L1 loss, so the slowest steps (a busy neighbour) pull
less and a step's error counts the same whether it is too fast or too slow. Without a profile, fit_scratch() fits every term
from served steps alone (calibration.fit on one measurement per step)."""
from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares, lsq_linear

from core.features import FEATURE_NAMES, StepFeatures
from core.fitted_cost import FittedCostModel

ROBUST_SCALE = 0.05  # soft-L1 turns linear beyond a 5% log ratio: a median-like fit of noisy steps
MIN_STEPS = 5  # steps of a kind needed to fit the term that prices it
SMALL_CHUNK = 128  # "small chunk" kind: a prefill of at most this many tokens


def features(steps: dict[str, np.ndarray]) -> list[StepFeatures]:
    cols = [steps[n] for n in FEATURE_NAMES]
    return [StepFeatures(*(int(v) for v in row)) for row in zip(*cols)]


def kinds(steps: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Masks of the step kinds serving produces (they overlap): decode (decode-only, in
    steady context), prefill (with a chunk), small_chunk, mixed (chunk + decodes),
    after_prefill, after_idle."""
    pre, dec = steps["prefill_tokens"] > 0, steps["decode_tokens"] > 0
    ap, ai = steps["after_prefill"] > 0, steps["after_idle"] > 0
    return {"decode": ~pre & ~ap & ~ai, "prefill": pre,
            "small_chunk": pre & (steps["prefill_tokens"] <= SMALL_CHUNK * steps["num_prefill_seqs"]),
            "mixed": pre & dec, "after_prefill": ap, "after_idle": ai}


def predict(cost, feats: list[StepFeatures]) -> np.ndarray:
    return np.array([cost.step_time(f) for f in feats], dtype=float)


def judge(measured: np.ndarray, predicted: np.ndarray) -> dict:
    """n, median absolute % error, median signed % error (+: predicted slower), and the
    share of steps predicted faster than measured."""
    ok = measured > 0
    m, p = measured[ok], predicted[ok]
    if not m.size:
        return {"n": 0, "median_ape": None, "median_error": None, "faster_share": None}
    err = (p - m) / m * 100
    return {"n": int(m.size), "median_ape": round(float(np.median(np.abs(err))), 2),
            "median_error": round(float(np.median(err)), 2),
            "faster_share": round(float(np.mean(p < m)), 3)}


def judge_kinds(steps: dict[str, np.ndarray], predicted: np.ndarray) -> dict[str, dict]:
    measured = steps["duration_s"]
    out = {"all": judge(measured, predicted)}
    for name, mask in kinds(steps).items():
        out[name] = judge(measured[mask], predicted[mask])
    return out


def missing_kinds(feats: list[StepFeatures], need: tuple[str, ...]) -> list[str]:
    """Which of the kinds `need` have fewer than MIN_STEPS steps, as 'N KIND steps'."""
    count = {"prefill": sum(f.num_prefill_seqs > 0 for f in feats),
             "decode": sum(f.prefill_tokens == 0 for f in feats),
             "after_prefill": sum(f.after_prefill for f in feats),
             "after_idle": sum(f.after_idle for f in feats)}
    return [f"{count[k]} {k} step(s)" for k in need if count[k] < MIN_STEPS]


def refine(base: FittedCostModel, feats: list[StepFeatures], y: np.ndarray) -> tuple[FittedCostModel, float]:
    """The profile `base` fitted to served steps (see the module docstring): the
    refined model and the fitted scale."""
    plain = [f._replace(after_prefill=0, after_idle=0) for f in feats]
    X = np.column_stack([predict(base, plain),
                         [f.num_prefill_seqs for f in feats],
                         [f.after_prefill for f in feats],
                         [f.after_idle for f in feats]]).astype(float)
    A = X / y[:, None]
    scale = np.abs(A).max(axis=0)
    scale[scale == 0] = 1.0
    A = A / scale
    lo = np.array([0.0, -base.per_chunk_s * scale[1], 0.0, 0.0])  # per_chunk_s stays >= 0 at scale ~1
    x = np.maximum(lsq_linear(A, np.ones(len(y)), bounds=(lo, np.inf), method="bvls").x, lo)
    x[0] = max(x[0], 1e-3)

    # Residuals in log ratio, not relative error: served steps are timed once, and a
    # few run 2-5x slow (a neighbour took the core); (p - y) / y caps such a step's pull
    # at -1 while a step predicted 2x too slow pulls +1, which biased the fit fast.
    def resid(z):
        return np.log(np.maximum(A @ z, 1e-12))

    def jac(z):
        return A / np.maximum(A @ z, 1e-12)[:, None]

    x = least_squares(resid, x, jac=jac, bounds=(lo, np.inf), loss="soft_l1",
                      f_scale=ROBUST_SCALE, method="trf").x / scale
    s, d_chunk, ap, ai = (float(v) for v in x)
    m = base.scaled(1.0 / s, 1.0 / s, s) if s > 0 else base
    m = FittedCostModel(m.shape, m.overhead_s, m.per_seq_s, max(0.0, m.per_chunk_s + d_chunk),
                        m.s_per_weight_byte, m.s_per_flop, m.s_per_kv_byte, m.s_per_attn_flop,
                        m.small_rows, m.combine, max(0.0, ap), max(0.0, ai))
    return m, s
