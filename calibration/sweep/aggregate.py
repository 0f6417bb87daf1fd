"""From raw timings (one record per point and round) to one robust figure per point.

Drift: the VM's speed changes, and other work on the machine slows every step for a
while (docs/results/2026-11-30-calibration.md). Two estimates of the
machine's speed at each timing:
- reference: the reference kernel's time taken just before it, over its sweep median;
- rolling: the median, over the ROLLING timings either side (in time order; points
  shuffled, so they are different points), of each timing's ratio to its own point's
  median: a slow episode lifts all of them together.
Dividing by one of them is used only if it makes a point's repeats agree better
(smaller median MAD/median): checked per sweep, not assumed."""
from __future__ import annotations

import numpy as np

from batchlab.calibration.sweep.grid import Grid
from batchlab.calibration.sweep.timing import robust_median
from batchlab.core.features import masked_pairs_estimate
from batchlab.core.cost.profile import Measurement


def _per_point(records: list[dict], grid: Grid, scale: dict[int, float] | None) -> list[Measurement]:
    by_key: dict[str, list[float]] = {}
    feats: dict[str, list[dict]] = {}
    for i, r in enumerate(records):
        t = r["t"] / scale[i] if scale else r["t"]
        by_key.setdefault(r["key"], []).append(t)
        feats.setdefault(r["key"], []).append(r["features"])
    held = grid.heldout()
    out = []
    for p in grid.points:
        if p.key not in by_key:
            continue
        med, mad, kept = robust_median(by_key[p.key])
        out.append(Measurement(point=p.key, region=p.region, features=_median_features(feats[p.key]),
                               median_s=med,
                               mad_s=mad, reps=kept, heldout=p.key in held))
    return out


def _median_features(fs: list[dict]) -> dict[str, int]:
    """A point's features: the median of its timings' (prefill points are timed in a
    shape a few tokens off each time, calibration/sweep/runner.py fresh_variant). Timings
    recorded before masked_pairs existed get it from the chunk (a point's chunks are equal)."""
    out = {k: int(round(float(np.median([f.get(k, 0) for f in fs])))) for k in fs[0]}
    if "masked_pairs" not in out:
        out["masked_pairs"] = masked_pairs_estimate(out.get("prefill_tokens", 0),
                                                    out.get("num_prefill_seqs", 0))
    return out


def spread_pct(ms: list[Measurement]) -> float | None:
    """Median over points of MAD/median, in %: how well a point's repeats agree."""
    rel = [m.mad_s / m.median_s for m in ms if m.median_s > 0 and m.reps > 1]
    return float(np.median(rel) * 100) if rel else None


ROLLING = 10
NORMALISE = ("auto", "none", "reference", "rolling")


def _reference_scale(records: list[dict]) -> dict[int, float] | None:
    refs = np.array([r["ref"] if r.get("ref") else np.nan for r in records], dtype=float)
    if refs.size == 0 or not np.isfinite(refs).all():
        return None
    center = float(np.median(refs))
    return {i: float(x) / center for i, x in enumerate(refs)}


def _rolling_scale(records: list[dict]) -> dict[int, float] | None:
    by: dict[str, list[float]] = {}
    for r in records:
        by.setdefault(r["key"], []).append(r["t"])
    med = {k: float(np.median(v)) for k, v in by.items()}
    ratio = np.array([r["t"] / med[r["key"]] for r in records])
    if ratio.size < 2 * ROLLING + 1:
        return None
    return {i: float(np.median(ratio[max(0, i - ROLLING):i + ROLLING + 1])) for i in range(ratio.size)}


def summarize(records: list[dict], grid: Grid, normalise: str = "auto") -> tuple[list[Measurement], str]:
    """(one Measurement per measured grid point, the drift normalisation used).
    normalise: "auto" (whichever tightens the repeats most, or none), "none",
    "reference", "rolling". Records must be in time order; warm-ups are skipped."""
    if normalise not in NORMALISE:
        raise ValueError(f"normalise must be one of {', '.join(NORMALISE)}, got {normalise!r}")
    records = [r for r in records if r.get("round", 0) >= 0]
    scales = {"none": None, "reference": _reference_scale(records), "rolling": _rolling_scale(records)}
    if normalise != "auto":
        if normalise != "none" and scales[normalise] is None:
            normalise = "none"  # no reference timings, or too few timings to roll over
        return _per_point(records, grid, scales[normalise]), normalise
    tried = {name: _per_point(records, grid, sc) for name, sc in scales.items()
             if name == "none" or sc is not None}
    best = min(tried, key=lambda n: (spread_pct(tried[n]) or 0.0, n != "none"))
    return tried[best], best
