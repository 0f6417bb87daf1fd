"""Every judged number of a cell: the real runs' values and spread, the simulated value,
its error raw and normalised, and its verdict. A simulated value outside the real runs'
[min, max] by more than the target is a miss however wide they spread; a number is
undecidable only where the real runs spread wider than its target AND the simulation
lies inside their range (nothing this hardware measured tells it apart). Then the counts
over many rows, as the fidelity study gives them."""
from __future__ import annotations

import math

import numpy as np

from batchlab.experiments.validation.metrics import LATENCY_SUFFIX, Number, numbers, rel_error
from batchlab.experiments.validation.records import Counts, MetricRow, Spread, Totals
from batchlab.experiments.validation.stat_tests import inside, spread

VERDICTS = ("ok", "miss", "undecidable", "overloaded")


def beyond_range(sim: float, sp: Spread) -> float:
    """How far sim lies outside the real runs' [min, max], relative to the nearer end
    (0 inside; NaN where either is undefined)."""
    if sim is None or not math.isfinite(sim) or not sp.n:
        return math.nan
    if sim > sp.max:
        return (sim - sp.max) / abs(sp.max) if sp.max else math.inf
    if sim < sp.min:
        return (sp.min - sim) / abs(sp.min) if sp.min else math.inf
    return 0.0


def verdict(err: float, target: float | None, sp: Spread, sim: float, flagged: bool) -> str:
    """ok / miss against the target; miss whenever sim lies outside the real runs'
    range by more than the target; undecidable only where they spread wider than the
    target and sim lies inside their range; overloaded (not judged); '' where the number
    has no target or no real run measured it."""
    if target is None:
        return ""
    if flagged:
        return "overloaded"
    if not sp.n:
        return ""  # nothing real to judge against
    out = beyond_range(sim, sp)
    if math.isfinite(out) and out > target:
        return "miss"
    if math.isfinite(sp.range) and sp.range > target and out == 0.0:
        return "undecidable"
    return "ok" if math.isfinite(err) and abs(err) <= target else "miss"


def metric_rows(real_sums: list[dict], sim_sum: dict, norm_sums: list[dict] | None,
                flagged: bool, extra: tuple[Number, ...] = ()) -> list[MetricRow]:
    """Per number of the summaries: the real runs' values and spread, the simulated
    value, its median error over the real runs raw and normalised (norm_sums[i]: the
    simulation at real run i's machine speed; None: no run had steps to measure it), and
    the verdicts. flagged: some run is overloaded (latencies not judged). extra: numbers
    besides the usual ones (a pools' cell: the hand-off's, pools.py)."""
    rows = []
    for n in [*numbers(), *extra]:
        overloaded = flagged and n.latency
        sim = float(sim_sum.get(n.key, math.nan))
        values = [s.get(n.key, math.nan) for s in real_sums]
        sp = spread(values)
        raw_med = _median([rel_error(v, sim) for v in values])
        norm_med = (math.nan if norm_sums is None else
                    _median([rel_error(v, s.get(n.key, math.nan)) for v, s in zip(values, norm_sums)]))
        # the normalised simulations (one per real run's speed) as one value: their median
        norm_sim = math.nan if norm_sums is None else _median([s.get(n.key, math.nan) for s in norm_sums])
        rows.append(MetricRow(
            key=n.key, metric=n.metric, stat=n.stat, real=values, sim=sim, spread=sp,
            sim_inside=inside(sim, sp), error=raw_med, error_normalised=norm_med, target=n.target,
            overloaded=overloaded, verdict=verdict(raw_med, n.target, sp, sim, overloaded),
            verdict_normalised=None if norm_sums is None else verdict(norm_med, n.target, sp, norm_sim,
                                                                      overloaded)))
    return rows


def _median(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.median(xs)) if xs else math.nan


def counts(rows: list[MetricRow], normalised: bool = False) -> Counts:
    """How many judged rows (those with a target) got each verdict."""
    got = [m.verdict_normalised if normalised else m.verdict for m in rows if m.target is not None]
    return Counts(**{v: sum(g == v for g in got) for v in VERDICTS})


def within(rows: list[MetricRow], normalised: bool = False) -> tuple[int, int]:
    """(rows within target, judged rows of stable runs with a finite error), whatever
    the noise floor says."""
    pairs = [(_error(m, normalised), m.target) for m in rows
             if m.target is not None and _verdict(m, normalised) != "overloaded"]
    judged = [(e, t) for e, t in pairs if math.isfinite(e)]
    return sum(abs(e) <= t for e, t in judged), len(judged)


def faster(rows: list[MetricRow], normalised: bool = False) -> tuple[int, int]:
    """(latency rows the simulation predicts faster, judged latency rows of stable runs
    with a finite error): the one-sided count."""
    errs = [_error(m, normalised) for m in rows
            if m.target is not None and m.key.endswith(LATENCY_SUFFIX) and not m.overloaded]
    errs = [e for e in errs if math.isfinite(e)]
    return sum(e < 0 for e in errs), len(errs)


def _error(m: MetricRow, normalised: bool) -> float:
    e = m.error_normalised if normalised else m.error
    return math.nan if e is None else e


def _verdict(m: MetricRow, normalised: bool) -> str | None:
    return m.verdict_normalised if normalised else m.verdict


def totals(rows: list[MetricRow]) -> Totals:
    """Over metric rows: within target raw and normalised, how many latency numbers the
    simulation predicts faster, and the verdicts."""
    (w, n), (wn, nn) = within(rows), within(rows, True)
    (f, lat), (fn, latn) = faster(rows), faster(rows, True)
    return Totals(within=w, judged=n, within_normalised=wn, judged_normalised=nn, faster=f, latency=lat,
                  faster_normalised=fn, latency_normalised=latn, verdicts=counts(rows),
                  verdicts_normalised=counts(rows, True))
