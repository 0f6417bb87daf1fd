"""Fitting the cost model to served steps, and judging it per step kind.

A served step is timed once, in its own context: a new prompt length, a chunk of any
size, right after a prefill or an idle gap, or a steady decode right after another one.
A sweep's medians fix the structure (bandwidths, FLOP rates, small-row shape); what
serving adds is priced by refine():

    t_served = s_mem * t_memory(f) + s_comp * t_compute(f) + d_chunk * prefill_seqs
               + d_seq * num_seqs + after_prefill_s * after_prefill
               + after_idle_s * after_idle + steady_s * steady

t_memory and t_compute split the profile's price (FittedCostModel.parts): fixed costs
with weight and KV traffic, and FLOPs. s_mem and s_comp are serving's levels against
the sweep's. d_chunk is the fixed cost of a chunk of a shape the process has not run
(added to per_chunk_s), d_seq that of a served sequence (added to per_seq_s: decodes of
unequal contexts run in a few padded groups); the context terms are new. steady is 1
for a decode-only step after another decode (core/cost/fitted.py is_steady): a sweep
times every point after some other shape, and serving's run of decodes differs from
it by a fixed amount, while prefill-bearing steps run at the sweep's level: one memory
level fitted mostly on those decodes would price prefills and mixed steps too cheap
(the measurements: docs/results/2026-12-01-calibration-serving.md).
It is a linear least-squares problem, solved in relative error and then refined on the
log ratio of predicted to measured with a soft-L1 loss, so the slowest steps (a busy
neighbour) pull less and a step's error counts the same whether it is too fast or too
slow; the compute side and the steady decodes are then re-levelled to the mean step
(latencies are sums of steps). Without a profile, calibration/served/from_run.py fits every
term from served steps alone (fitted_form.py on one measurement per step), then
refines it here."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.optimize import least_squares, lsq_linear

from batchlab.core.features import StepFeatures
from batchlab.core.cost.cpu_form import CpuFormModel
from batchlab.core.cost.fitted import FittedCostModel, is_steady
from batchlab.core.step_table import CONTENDED  # a served step over this x its price had its core taken

MIN_COMPUTE_SHARE = 0.05  # of the served time, for a compute level of its own
ROBUST_SCALE = 0.05  # soft-L1 turns linear beyond a 5% log ratio: a median-like fit of noisy steps
MIN_STEPS = 5  # steps of a kind needed to fit the term that prices it
SMALL_CHUNK = 128  # "small chunk" kind: a prefill of at most this many tokens


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


def refine(base: FittedCostModel | CpuFormModel, feats: list[StepFeatures],
           y: np.ndarray) -> tuple[FittedCostModel | CpuFormModel, Levels]:
    """The profile `base` fitted to served steps (see the module docstring): the
    refined model and the fitted levels."""
    parts = np.array([base.parts(f) for f in feats], dtype=float).reshape(-1, 2)  # no context terms
    # Two levels only where the steps tell them apart: with compute under MIN_COMPUTE_SHARE
    # of the time (decode-only traffic), one level prices both sides.
    two = parts[:, 1].sum() >= MIN_COMPUTE_SHARE * parts.sum()
    level_cols = parts if two else parts.sum(axis=1, keepdims=True)
    steady = np.array([is_steady(f) for f in feats], dtype=float)
    X = np.column_stack([level_cols,
                         [f.num_prefill_seqs for f in feats],
                         [f.num_seqs for f in feats],
                         [f.after_prefill for f in feats],
                         [f.after_idle for f in feats],
                         steady]).astype(float)
    k = level_cols.shape[1]
    A = X / y[:, None]
    scale = np.abs(A).max(axis=0)
    scale[scale == 0] = 1.0
    A = A / scale
    lo = np.zeros(A.shape[1])
    lo[k] = -base.per_chunk_s * scale[k]  # per_chunk_s and per_seq_s stay >= 0 at level ~1
    lo[k + 1] = -base.per_seq_s * scale[k + 1]
    # A steady decode finds what the step before left in cache: it can run faster than the
    # sweep's price, not slower (left free, batchlab-small traded +4.7 ms there against a
    # memory level of x0.57: the same prices, a meaningless split).
    lo[k + 4], hi = -np.inf, np.full(A.shape[1], np.inf)
    hi[k + 4] = 0.0
    x = np.clip(lsq_linear(A, np.ones(len(y)), bounds=(lo, hi), method="bvls").x, lo, hi)
    x[:k] = np.maximum(x[:k], 1e-3 * scale[:k])

    # Residuals in log ratio, not relative error: served steps are timed once, and a
    # few run 2-5x slow (a neighbour took the core); (p - y) / y caps such a step's pull
    # at -1 while a step predicted 2x too slow pulls +1, which biased the fit fast.
    def resid(z):
        return np.log(np.maximum(A @ z, 1e-12))

    def jac(z):
        return A / np.maximum(A @ z, 1e-12)[:, None]

    x = least_squares(resid, x, jac=jac, bounds=(lo, hi), loss="soft_l1",
                      f_scale=ROBUST_SCALE, method="trf").x / scale
    mem = float(x[0])
    comp = float(x[1]) if two else mem
    d_chunk, d_seq, ap, ai, st = (float(v) for v in x[k:])
    m = base.at_speed(mem, comp) if mem > 0 and comp > 0 else base
    m = m.with_terms(max(0.0, m.per_chunk_s + d_chunk), max(0.0, m.per_seq_s + d_seq), max(0.0, ap),
                     max(0.0, ai), st)
    # The robust fit prices the typical step; latencies add steps up, so they need the
    # mean one (served steps are skewed slow: measured mean / median 1.02-1.09). Re-level
    # to the mean: the steady decodes by their fixed term, then the compute side on the
    # steps with a prefill chunk; contended steps (over CONTENDED x their price) left out.
    r_comp, shift = mean_levels(m, feats, y, compute=two)
    out = m.at_speed(1.0, r_comp)
    return (out.with_terms(out.per_chunk_s, out.per_seq_s, out.after_prefill_s, out.after_idle_s,
                           m.steady_s + shift), Levels(mem, comp * r_comp))


def mean_levels(m: FittedCostModel | CpuFormModel, feats: list[StepFeatures], y: np.ndarray,
                compute: bool = True) -> tuple[float, float]:
    """(factor on the compute side, then seconds added to every steady decode) that make
    `m`'s total time equal the measured total: over the prefill-bearing steps, and over
    the steady decodes (1.0 and 0.0 where there is no uncontended step of the kind, or
    for compute, where `compute` is False: the steps cannot tell its level apart)."""
    def uncontended(model):
        pred = predict(model, feats)
        return pred, (pred > 0) & (y > 0) & (y <= CONTENDED * pred)
    pred, ok = uncontended(m)
    pre = ok & np.array([f.prefill_tokens > 0 for f in feats], dtype=bool)
    comp = np.array([m.parts(f)[1] for f in feats])[pre]
    r_comp = (max(float(1.0 + (y[pre] - pred[pre]).sum() / comp.sum()), 1e-3)
              if compute and comp.sum() > 0 else 1.0)
    pred, ok = uncontended(m.at_speed(1.0, r_comp))
    steady = ok & np.array([is_steady(f) for f in feats], dtype=bool)
    return r_comp, float((y[steady] - pred[steady]).mean()) if steady.any() else 0.0
