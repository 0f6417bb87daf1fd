"""How well datasheet scaling predicts one measured GPU from another: the error bar of a
profile borrowed by a GPU without operator tables (core/cost/gpu_profile.py scaled_to).

For every ordered pair of measured GPUs (source, target) and every (model, TP degree) the
target's tables time, the source's layer constants are fitted on the source's other
models at the other TP degrees (the scheme judge_layers uses), kept as the same fractions
of the target's datasheet bandwidth and 16-bit peak (what scaled_to does), and price the
target's shapes at the source's GEMM tile. The target's own fit under the same scheme
prices the same shapes beside it: the difference is what the scaling costs. A step is one
decoder layer's GEMMs and elementwise kernels, as the profiles' held-out error; attention
(timed on the A100 only) and collectives (their own tables) are not judged here.

The interval a borrowed price carries is the range of measured / priced over the pairs,
by region (decode, ridge, prefill): each (pair, region)'s median, so a whole step's price
is moved as far as scaling moved a region's typical step, not by a single shape's spread."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from batchlab.calibration.operators.collectives import error_stats
from batchlab.calibration.operators.fit import REGIONS, LayerArrays, best_tile, fit_layers, layer_prices, region
from batchlab.calibration.operators.vidur import LayerTiming
from batchlab.core.cost.gpu_profile import ErrorStats
from batchlab.core.model.hardware import HardwareSpec


class Measured(NamedTuple):
    """One measured GPU: its preset, its layer timings, and the GEMM tile its profile picks."""
    hw: HardwareSpec
    rows: list[LayerTiming]
    tile: float

    @classmethod
    def of(cls, hw: HardwareSpec, rows: list[LayerTiming]) -> Measured:
        return cls(hw, rows, best_tile(rows, hw.mem_bandwidth, hw.flops_for("bf16"))[0])


class PairJudgment(NamedTuple):
    source: str
    target: str
    scaled: dict[str, ErrorStats]  # priced / measured - 1 of the scaled source, by region and "all"
    own: dict[str, ErrorStats]  # the target's own fit, the same shapes left out the same way
    ratio: dict[str, float]  # median measured / priced of the scaled source, by region and "all"
    held: int  # (model, TP degree) pairs of the target judged


def _by_region(tokens: list[int], values: list[float]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {g: [] for g in (*REGIONS, "all")}
    for t, v in zip(tokens, values):
        out[region(t)].append(v)
        out["all"].append(v)
    return {g: v for g, v in out.items() if v}


Constants = list[float] | None  # a fit's layer constants (None: too few rows left to fit on)


def _constants(fitted_on: Measured, held: tuple[str, int], memo: dict) -> Constants:
    """The layer constants fitted on `fitted_on`'s rows of other models at other TP degrees
    than `held` (memo: one fit per GPU and held-out pair, whichever GPU it then prices)."""
    key = (fitted_on.hw.name, *held)
    if key not in memo:
        label, tp = held
        train = [r for r in fitted_on.rows if r.label != label and r.tp != tp]
        src = fitted_on.hw
        memo[key] = None if len({r.label for r in train}) < 2 else list(
            fit_layers(train, src.mem_bandwidth, src.flops_for("bf16"), fitted_on.tile).values.values())
    return memo[key]


def _prices(x: list[float], tile: float, judged: list[LayerTiming], on: HardwareSpec) -> np.ndarray:
    """The judged rows priced by constants x as the same fractions of `on`'s datasheet."""
    g, e = layer_prices(x, LayerArrays.of(judged), on.mem_bandwidth, on.flops_for("bf16"), tile)
    return g.sum(axis=1) + e


def judge_pair(source: Measured, target: Measured, memo: dict | None = None) -> PairJudgment:
    memo = {} if memo is None else memo
    tokens: list[int] = []
    scaled: list[float] = []
    own: list[float] = []
    n = 0
    for held in sorted({(r.label, r.tp) for r in target.rows}):
        judged = [r for r in target.rows if (r.label, r.tp) == held]
        a, b = _constants(source, held, memo), _constants(target, held, memo)
        if a is None or b is None:
            continue
        n += 1
        measured = np.array([r.total_s for r in judged])
        tokens += [r.tokens for r in judged]
        scaled += (_prices(a, source.tile, judged, target.hw) / measured - 1).tolist()
        own += (_prices(b, target.tile, judged, target.hw) / measured - 1).tolist()
    s, o = _by_region(tokens, scaled), _by_region(tokens, own)
    return PairJudgment(source.hw.name, target.hw.name, {g: error_stats(v) for g, v in s.items()},
                        {g: error_stats(v) for g, v in o.items()},
                        {g: round(float(np.median(1 / (1 + np.array(v)))), 4) for g, v in s.items()}, n)


def judge_scaling(measured: list[Measured]) -> list[PairJudgment]:
    """Every ordered pair of the measured GPUs, source first."""
    memo: dict = {}
    return [judge_pair(s, t, memo) for s in measured for t in measured if s.hw.name != t.hw.name]


def interval(pairs: list[PairJudgment]) -> tuple[float, float]:
    """(low, high) factor on a scaled price: the least and the most measured / priced of any
    pair's region (its median), 1 within it."""
    medians = [v for p in pairs for g, v in p.ratio.items() if g != "all"]
    return min([1.0, *medians]), max([1.0, *medians])
