"""Which kinds of step the profile misprices: every real step put in one kind (first
match wins), and per kind the measured time over the profile's price, raw and over the
price at the run's machine speed (experiments/machine_speed.py; normalised.py, as the
normalised simulation prices it: a fitted profile's memory side at the level of the 2 s
window the step starts in, where the run measured its drift, and its FLOP terms at the
run's compute factor), so a kind's figure says how much more or less it costs than the
run's steady decode steps and compute-bound steps, relative to the profile."""
from __future__ import annotations

import math

import numpy as np

from batchlab.core.cost.form import CostForm, CostModel
from batchlab.core.features import IDLE_GAP_S
from batchlab.core.run_meta import MachineSpeed
from batchlab.core.step_table import price, step_features
from batchlab.experiments.validation.normalised import normalised_cost
from batchlab.experiments.validation.records import KindRow

# tokens: prefill chunks up to this size were the worst priced (docs/results/2026-12-02-fidelity.md)
SMALL_CHUNK = 128
KINDS = ("after idle gap", "prefill only, <= 128 tokens", "prefill only, > 128 tokens",
         "mixed, chunk <= 128", "mixed, chunk > 128", "decode after a prefill", "steady decode")


def classify(steps: dict[str, np.ndarray]) -> np.ndarray:
    """The kind (index into KINDS) of every step of a step table."""
    start, dur = np.asarray(steps["start_s"], float), np.asarray(steps["duration_s"], float)
    pre, dec = np.asarray(steps["prefill_tokens"]), np.asarray(steps["decode_tokens"])
    gap = np.concatenate(([np.inf], start[1:] - (start[:-1] + dur[:-1]))) if start.size else start
    after_prefill = np.concatenate(([False], pre[:-1] > 0)) if start.size else pre > 0
    small = pre <= SMALL_CHUNK
    conditions = [gap > IDLE_GAP_S, (pre > 0) & (dec == 0) & small, (pre > 0) & (dec == 0),
                  (pre > 0) & small, pre > 0, after_prefill, np.ones(start.size, bool)]
    return np.select(conditions, np.arange(len(KINDS)), default=len(KINDS) - 1)


def ratios(steps: dict[str, np.ndarray], cost: CostModel) -> np.ndarray:
    """Every step's measured time / `cost`'s price (nan where it prices 0)."""
    return _over_price(steps, price(steps, cost))


def normalised_ratios(steps: dict[str, np.ndarray], cost: CostForm, speed: MachineSpeed | None) -> np.ndarray:
    """Every step's measured time / its price at the run's machine speed, each step priced
    by the model of the moment it starts, as the normalised simulation prices it."""
    model = normalised_cost(cost, speed, None)
    predicted = [model.at(t).step_time(f) for t, f in zip(np.asarray(steps["start_s"], float), step_features(steps))]
    return _over_price(steps, np.array(predicted, dtype=float))


def _over_price(steps: dict[str, np.ndarray], predicted: np.ndarray) -> np.ndarray:
    measured = np.asarray(steps["duration_s"], float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(predicted > 0, measured / predicted, np.nan)


def kind_table(runs: list[tuple[dict[str, np.ndarray], MachineSpeed | None]], cost: CostForm,
               run_costs: list[CostForm] | None = None) -> list[KindRow]:
    """runs: (step table, its meta's machine_speed) of each real run. Per kind: steps,
    median measured/price, the same over the price at the run's speed, and the median
    |error| of the profile's price before and after normalising by the speed. run_costs:
    each run's own price (with the draft's passes where it speculated), else `cost`."""
    kinds, raw, norm = [], [], []
    for i, (steps, speed) in enumerate(runs):
        c = run_costs[i] if run_costs is not None else cost
        kinds.append(classify(steps))
        raw.append(ratios(steps, c))
        norm.append(normalised_ratios(steps, c, speed))
    k, raw, norm = np.concatenate(kinds), np.concatenate(raw), np.concatenate(norm)
    rows = []
    for i, name in enumerate(KINDS):
        m = (k == i) & np.isfinite(raw)
        n = int(m.sum())
        med = (lambda x: float(np.median(x)) if n else math.nan)
        rows.append(KindRow(kind=name, steps=n, ratio=med(raw[m]), ratio_normalised=med(norm[m]),
                            ape=med(np.abs(1 / raw[m] - 1)) if n else math.nan,
                            ape_normalised=med(np.abs(1 / norm[m] - 1)) if n else math.nan))
    return rows
