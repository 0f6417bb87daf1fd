"""Repeats over seeds: each metric's mean with a 95% confidence interval (Student t
over the seeds), and for a second policy the paired difference against the first
(same seed, same requests: the noise the two share cancels), with its interval. A
difference whose interval excludes 0 is decided at 95%; one of zero width (the seeds
gave the same difference every time: nothing varied that the difference depends on)
never is."""
from __future__ import annotations

import math

import numpy as np

from batchlab.experiments.report import ROWS, layout

# Student t's 97.5% quantile by degrees of freedom (scipy.stats is not imported: it is
# slow to load, and the simulator must run without the backend's packages).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t975(df: int) -> float:
    if df <= len(T975):
        return T975[df - 1]
    z = 1.959964  # beyond 30: the Cornish-Fisher expansion, within 1e-4
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high); with one value, or identical ones, the interval is the value."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], float)
    if len(v) == 0:
        return math.nan, math.nan, math.nan
    m = float(v.mean())
    if len(v) < 2:
        return m, m, m
    half = float(t975(len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
    return m, m - half, m + half


def numeric(summary: dict) -> dict[str, float]:
    return {k: float(v) for k, v in summary.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def aggregate(runs: list[dict]) -> dict[str, dict[str, float]]:
    """metric -> {mean, ci95_low, ci95_high} over the seeds' summaries."""
    keys = numeric(runs[0]).keys()
    out = {}
    for k in keys:
        m, lo, hi = mean_ci([numeric(r).get(k, math.nan) for r in runs])
        out[k] = {"mean": m, "ci95_low": lo, "ci95_high": hi}
    return out


def decided(lo: float, hi: float) -> bool:
    """Whether an interval excludes 0; one of zero width (or undefined) decides nothing."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return False
    # zero width up to rounding: identical differences whose mean is off by an ulp
    if hi - lo <= 1e-9 * max(abs(lo), abs(hi)):
        return False
    return bool(lo > 0 or hi < 0)


def paired(runs: list[dict], base: list[dict]) -> dict[str, dict[str, float]]:
    """metric -> the mean difference (runs - base, seed by seed) and its interval."""
    out = {}
    for k in numeric(base[0]):
        d = [numeric(r).get(k, math.nan) - numeric(b).get(k, math.nan) for r, b in zip(runs, base)]
        m, lo, hi = mean_ci(d)
        out[k] = {"mean": m, "ci95_low": lo, "ci95_high": hi, "decided": decided(lo, hi)}
    return out


def repeats_summary(runs: dict[str, list[dict]], seeds: list[int]) -> dict[str, dict]:
    """Per policy: its seeds, each seed's stability verdict, each metric's mean and
    interval; for every later policy, its paired difference against the first."""
    names = list(runs)
    out = {p: {"seeds": seeds, "stability": [r["stability"] for r in runs[p]],
               "metrics": aggregate(runs[p])} for p in names}
    for p in names[1:]:
        out[p]["paired_difference_vs_" + names[0]] = paired(runs[p], runs[names[0]])
    return out


def _cell(fmt: str, s: dict[str, float] | None, sign: bool = False) -> str:
    if s is None or not math.isfinite(s["mean"]):
        return "-"
    mean_fmt = fmt.replace("{:", "{:+") if sign else fmt
    return f"{mean_fmt.format(s['mean'])} ± {fmt.format((s['ci95_high'] - s['ci95_low']) / 2)}"


def repeats_table(per_policy: dict[str, list[dict]]) -> str:
    """One column per policy (mean ± 95% half-width), then one per later policy with
    its paired difference against the first, marked * where decided."""
    names = list(per_policy)
    agg = {n: aggregate(r) for n, r in per_policy.items()}
    base = names[0]
    diffs = {n: paired(per_policy[n], per_policy[base]) for n in names[1:]}
    header = names + [f"{n} - {base}" for n in names[1:]]
    rows = []
    for key, label, fmt in ROWS:
        if key not in agg[base]:
            continue
        cells = [_cell(fmt, agg[n].get(key)) for n in names]
        for n in names[1:]:
            d = diffs[n].get(key)
            cells.append(_cell(fmt, d, sign=True) + (" *" if d and d["decided"] else ""))
        rows.append((label, cells))
    return layout(header, rows)
