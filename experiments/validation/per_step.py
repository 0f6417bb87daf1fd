"""Issue 14's per-step test: the profile's median |error| on every real step, against how
far the real runs themselves differ on identical work, the noise floor no cost model can
beat. Identical work: steps of two runs of one cell with equal features (core/features.py,
every field), paired k-th with k-th in order; a pair's spread is |b - a| / a. A model
error at or below that spread prices steps as well as this machine repeats them."""
from __future__ import annotations

import math

import numpy as np

from batchlab.core.cost.form import CostForm
from batchlab.core.run_meta import MachineSpeed
from batchlab.core.features import FEATURE_NAMES
from batchlab.experiments.markdown import fmt
from batchlab.experiments.validation.records import PerStep
from batchlab.experiments.validation.step_kinds import normalised_ratios, ratios
from batchlab.experiments.validation.steps import match_steps


def identical_work_spread(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> np.ndarray:
    """|b - a| / a over the steps of runs a and b with equal features, k-th with k-th."""
    def keys(t: dict[str, np.ndarray]) -> list[tuple]:
        return list(zip(*(np.asarray(t[n]).tolist() for n in FEATURE_NAMES)))
    ia, ib = match_steps(keys(a), keys(b))
    da, db = np.asarray(a["duration_s"], float)[ia], np.asarray(b["duration_s"], float)[ib]
    ok = da > 0
    return np.abs(db[ok] - da[ok]) / da[ok]


def per_step(cells: list[list[tuple[dict[str, np.ndarray], MachineSpeed | None]]], cost: CostForm,
             apart: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = (),
             cell_costs: list[CostForm] | None = None) -> PerStep:
    """cells: per cell, (step table, its machine_speed) of each real run. The profile's
    median |error| per step raw and at each run's speed (step_kinds.normalised_ratios: as
    the normalised simulation prices each step), the share predicted faster, and the
    real-vs-real spread on identical work between the first two runs of each cell; `met`:
    model <= spread (raw). apart: pairs of runs of the identical work served at different
    times (validations hours apart), whose spread is the machine's repeatability over the
    time a profile is used for. cell_costs: each cell's own price (the profile with the
    draft's passes where its runs speculated), else `cost` for all."""
    raw, norm, spread, took = [], [], [], []
    for i, runs in enumerate(cells):
        c = cell_costs[i] if cell_costs is not None else cost
        for steps, speed in runs:
            raw.append(ratios(steps, c))
            took.append(np.asarray(steps["duration_s"], float))
            norm.append(normalised_ratios(steps, c, speed))
        if len(runs) >= 2:
            spread.append(identical_work_spread(runs[0][0], runs[1][0]))
    r = np.concatenate(raw) if raw else np.array([])
    n = np.concatenate(norm) if norm else np.array([])
    s = np.concatenate(spread) if spread else np.array([])
    d = np.concatenate(took) if took else np.array([])
    d, r, n = d[np.isfinite(r)], r[np.isfinite(r)], n[np.isfinite(n)]

    def ape(x: np.ndarray) -> float:
        return float(np.median(np.abs(1 / x - 1))) if x.size else math.nan
    model, floor = ape(r), float(np.median(s)) if s.size else math.nan
    return PerStep(steps=int(r.size), median_ape=model, median_ape_normalised=ape(n),
                   faster_share=float(np.mean(r > 1)) if r.size else math.nan,
                   real_vs_real=floor, pairs=int(s.size),
                   met=bool(model <= floor) if math.isfinite(model) and math.isfinite(floor) else None,
                   **one_level(d, r), **_apart(apart))


def _apart(pairs: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]) -> dict:
    if not pairs:
        return {}
    s = np.concatenate([identical_work_spread(a, b) for a, b in pairs])
    return {"real_vs_real_apart": float(np.median(s)) if s.size else math.nan, "pairs_apart": int(s.size)}


def one_level(took: np.ndarray, ratio: np.ndarray) -> dict:
    """The profile at one level for all the runs, two ways: x `level_total` makes their step
    times add up (what latencies, sums of steps, need), x `level_median` prices their median
    step, and the median |error| at each. Where step times are skewed (a shared machine's
    slow episodes) the two levels differ: the median |error| of a price that makes the
    totals right is what this shape of price achieves on these runs without leaning fast."""
    took, ratio = took[ratio > 0], ratio[ratio > 0]  # a step timed at 0 has no relative error
    if not took.size:
        return {}
    price = took / ratio
    total, median = float(took.sum() / price.sum()), float(np.median(ratio))

    def ape_at(k: float) -> float:
        return float(np.median(np.abs(k * price - took) / took))
    return {"level_total": total, "level_median": median,
            "median_ape_at_total": ape_at(total), "median_ape_at_median": ape_at(median)}


def describe(p: PerStep | None) -> str:
    """Issue 14's per-step test: the profile's error on every real step against the real
    runs' own spread on identical work, as a sentence."""
    if not p:
        return ""
    verdict = {True: "at or below it", False: "above it", None: "not decidable (too few runs)"}[p.met]
    return (f"Per step: the profile's median |error| over the {p.steps} real steps is "
            f"{_pct(p.median_ape)}% ({_pct(p.median_ape_normalised)}% "
            f"at each run's machine speed; predicted faster in {_pct(p.faster_share, '{:.0f}')}% "
            f"of the steps), against the real runs' own spread on identical work of "
            f"{_pct(p.real_vs_real)}% ({p.pairs} pairs of steps with equal "
            f"features, first two runs of each cell): {verdict}." + _apart_text(p) + _levels(p))


def _apart_text(p: PerStep) -> str:
    if not p.pairs_apart:
        return ""
    return (f" Between first runs of the same work stored by different validations (served at "
            f"other times): {_pct(p.real_vs_real_apart)}% ({p.pairs_apart} pairs).")


def _levels(p: PerStep) -> str:
    if p.level_total is None:  # no step timed above 0
        return ""
    short = (p.level_median / p.level_total - 1) * 100
    return (f" At one level for all these runs: the price x{p.level_total:.2f}, where their step "
            f"times add up, errs by a median {_pct(p.median_ape_at_total)}% a step; "
            f"x{p.level_median:.2f}, their median step, by {_pct(p.median_ape_at_median)}%, "
            f"with totals {short:+.0f}%.")


def _pct(x: float | None, spec: str = "{:.1f}") -> str:
    return fmt(None if x is None else x * 100, spec)  # '-' where not measured (NaN, or null read back)
