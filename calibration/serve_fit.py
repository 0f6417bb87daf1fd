"""Fitting the cost model to served steps, and judging it per step kind.

A served step is timed once, in its own context: a new prompt length, a chunk of any
size, right after a prefill or an idle gap. A sweep's warm medians fix the structure
(bandwidths, FLOP rates, small-row shape); what serving adds is priced by refine():

    t_served = s_mem * t_memory(f) + s_comp * t_compute(f) + d_chunk * prefill_seqs
               + after_prefill_s * after_prefill + after_idle_s * after_idle

t_memory and t_compute split the profile's price (FittedCostModel.parts): fixed costs
with weight and KV traffic, and FLOPs. s_mem and s_comp are serving's levels against
the sweep's, one each because they differ (measured on batchlab-tiny: served decode
steps ran 0.75-0.86x the sweep's price, prefill chunks 0.88-0.98x; one level fitted
mostly on decodes priced every prefill 20-45% too cheap). d_chunk is the fixed cost of
a chunk of a shape the process has not run (added to per_chunk_s), and the two context
terms are new. It is a linear least-squares problem, solved in relative error and then
refined on the log ratio of predicted to measured with a soft-L1 loss, so the slowest
steps (a busy neighbour) pull less and a step's error counts the same whether it is too
fast or too slow; each level is then re-levelled to the mean step (latencies are sums
of steps). Without a profile, calibration/from_run.py fits every term from served steps
alone (calibration.fit on one measurement per step), then refines it here."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.optimize import least_squares, lsq_linear

from core.features import FEATURE_NAMES, StepFeatures
from core.fitted_cost import FittedCostModel

CONTENDED = 2.0  # a served step over this many times its price had its core taken
MIN_COMPUTE_SHARE = 0.05  # of the served time, for a compute level of its own
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


class Levels(NamedTuple):
    """Serving's level against the profile's: memory (fixed costs, weight and KV
    traffic: what a decode step is made of) and compute (GEMM and attention FLOPs: what
    a prefill chunk is made of)."""
    memory: float
    compute: float

    def __str__(self) -> str:
        return f"memory x{self.memory:.3f}, compute x{self.compute:.3f}"


def refine(base: FittedCostModel, feats: list[StepFeatures], y: np.ndarray) -> tuple[FittedCostModel, Levels]:
    """The profile `base` fitted to served steps (see the module docstring): the
    refined model and the fitted levels."""
    plain = [f._replace(after_prefill=0, after_idle=0) for f in feats]
    parts = np.array([base.parts(f) for f in plain], dtype=float).reshape(-1, 2)
    # Two levels only where the steps tell them apart: with compute under MIN_COMPUTE_SHARE
    # of the time (decode-only traffic), one level prices both sides.
    two = parts[:, 1].sum() >= MIN_COMPUTE_SHARE * parts.sum()
    level_cols = parts if two else parts.sum(axis=1, keepdims=True)
    X = np.column_stack([level_cols,
                         [f.num_prefill_seqs for f in feats],
                         [f.after_prefill for f in feats],
                         [f.after_idle for f in feats]]).astype(float)
    k = level_cols.shape[1]
    A = X / y[:, None]
    scale = np.abs(A).max(axis=0)
    scale[scale == 0] = 1.0
    A = A / scale
    lo = np.zeros(A.shape[1])
    lo[k] = -base.per_chunk_s * scale[k]  # per_chunk_s stays >= 0 at level ~1
    x = np.maximum(lsq_linear(A, np.ones(len(y)), bounds=(lo, np.inf), method="bvls").x, lo)
    x[:k] = np.maximum(x[:k], 1e-3 * scale[:k])

    # Residuals in log ratio, not relative error: served steps are timed once, and a
    # few run 2-5x slow (a neighbour took the core); (p - y) / y caps such a step's pull
    # at -1 while a step predicted 2x too slow pulls +1, which biased the fit fast.
    def resid(z):
        return np.log(np.maximum(A @ z, 1e-12))

    def jac(z):
        return A / np.maximum(A @ z, 1e-12)[:, None]

    x = least_squares(resid, x, jac=jac, bounds=(lo, np.inf), loss="soft_l1",
                      f_scale=ROBUST_SCALE, method="trf").x / scale
    mem = float(x[0])
    comp = float(x[1]) if two else mem
    d_chunk, ap, ai = (float(v) for v in x[k:])
    m = base.scaled(1.0 / mem, 1.0 / comp, mem) if mem > 0 and comp > 0 else base
    m = FittedCostModel(m.shape, m.overhead_s, m.per_seq_s, max(0.0, m.per_chunk_s + d_chunk),
                        m.s_per_weight_byte, m.s_per_flop, m.s_per_kv_byte, m.s_per_attn_flop,
                        m.small_rows, m.combine, max(0.0, ap), max(0.0, ai))
    # The robust fit prices the typical step; latencies add steps up, so they need the
    # mean one (served steps are skewed slow: measured mean / median 1.02-1.09). Re-level
    # each side to the mean: memory on the decode-only steps, then compute on the steps
    # with a prefill chunk; contended steps (over CONTENDED x their price) left out.
    r_mem, r_comp = mean_levels(m, feats, y)
    if not two:
        r_comp = r_mem
    out = m.scaled(1.0 / r_mem, 1.0 / r_comp, r_mem)  # the context terms keep their fit
    out = FittedCostModel(*(getattr(out, f) for f in out.__dataclass_fields__
                            if f not in ("after_prefill_s", "after_idle_s")),
                          after_prefill_s=m.after_prefill_s, after_idle_s=m.after_idle_s)
    return out, Levels(mem * r_mem, comp * r_comp)


def mean_levels(m: FittedCostModel, feats: list[StepFeatures], y: np.ndarray) -> tuple[float, float]:
    """(memory, compute) factors that make `m`'s total time equal the measured total:
    memory over the decode-only steps, compute over the prefill-bearing ones given it
    (1.0 where a side has no uncontended step)."""
    pred = predict(m, feats)
    ok = (pred > 0) & (y > 0) & (y <= CONTENDED * pred)
    prefill = np.array([f.prefill_tokens > 0 for f in feats], dtype=bool)
    extra = np.array([m.after_prefill_s * f.after_prefill + m.after_idle_s * f.after_idle for f in feats])
    parts = np.array([m.parts(f._replace(after_prefill=0, after_idle=0)) for f in feats]).reshape(-1, 2)
    dec, pre = ok & ~prefill, ok & prefill
    r_mem = float((y[dec] - extra[dec]).sum() / parts[dec].sum()) if parts[dec].sum() > 0 else 1.0
    comp = parts[pre, 1].sum()
    r_comp = (float((y[pre] - extra[pre] - r_mem * parts[pre, 0]).sum() / comp) if comp > 0 else r_mem)
    return max(r_mem, 1e-3), max(r_comp, 1e-3)
