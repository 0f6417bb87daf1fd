"""A KV tier's figures in the step table and the summary, present only when a tier is on
(a run without one writes exactly what it wrote before).

Step columns (per replica, as each step was formed):
    tier_blocks_used        blocks the tier holds: swapped sequences and kept prefix units
    tier_blocks_total       its capacity in blocks
    tier_out_bytes          KV copied GPU -> tier: swap-outs and evicted prefix units
    tier_in_bytes           KV copied tier -> GPU: swap-ins and prefix hits in the tier
    tier_prefix_hit_tokens  prompt tokens a first admission found in the tier (past the GPU's cache)
    tier_swaps, tier_recomputes  preemptions that swapped, that dropped their KV
A fast-forwarded decode step moves nothing and leaves the tier as the step before it."""
from __future__ import annotations

import math

import numpy as np

from batchlab.core.kv_tiers.home import TieredHome

COLUMNS = ("tier_blocks_used", "tier_blocks_total", "tier_out_bytes", "tier_in_bytes",
           "tier_prefix_hit_tokens", "tier_swaps", "tier_recomputes")
_SUMS = COLUMNS[2:]


def _row(home: TieredHome, used: int, figures: tuple) -> tuple:
    out, into, hit, swaps, recomputes = figures
    bpt = home.bytes_per_token
    return (used, home.capacity, int(out * bpt), int(into * bpt), hit, swaps, recomputes)


def tier_columns(steps: dict[str, np.ndarray], homes: list[TieredHome]) -> dict[str, np.ndarray]:
    """The step table with the tier's columns, each row matched to its replica's home by
    start time (a row the home never saw, fast-forwarded, moved nothing)."""
    n = len(steps["start_s"])
    cols = np.zeros((n, len(COLUMNS)), np.int64)
    for i, home in enumerate(homes):
        rows = np.flatnonzero(steps["replica"] == i)
        if not len(rows):
            continue
        starts = np.array([r[0] for r in home.rows], float)
        at = np.searchsorted(starts, steps["start_s"][rows], side="right") - 1
        for row, k in zip(rows.tolist(), at.tolist()):
            if k < 0:
                cols[row] = _row(home, 0, (0,) * 5)
                continue
            start, used, *figures = home.rows[k]
            same = start == steps["start_s"][row]
            cols[row] = _row(home, used, tuple(figures) if same else (0,) * 5)
    return {**steps, **{c: cols[:, j] for j, c in enumerate(COLUMNS)}}


def tier_totals(homes: list[TieredHome]) -> dict[str, int]:
    """The sums the summary reads, for a run that keeps no step table."""
    out = dict.fromkeys(_SUMS, 0)
    out["tier_blocks_total"] = homes[0].capacity if homes else 0
    out["tier_blocks_max"] = max((h.max_blocks_used for h in homes), default=0)
    for h in homes:
        for name, v in zip(_SUMS, _row(h, 0, tuple(h.totals))[2:]):
            out[name] += v
    return out


def tier_summary(steps: dict[str, np.ndarray] | None, totals: dict, queries: float) -> dict[str, float]:
    """kv_tier_* figures, from the step table's columns (or the run's totals without
    one); {} for a run without a tier. queries: the prefix cache's queries (tokens), so
    that the tier's hit rate sits beside the GPU's prefix_cache_hit_rate."""
    if steps is not None and "tier_blocks_used" in steps:
        sums = {c: int(steps[c].sum()) for c in _SUMS}
        total = int(steps["tier_blocks_total"][0]) if len(steps["start_s"]) else 0
        used = steps["tier_blocks_used"]
        mean = float(used.mean()) / total if total and len(used) else math.nan
        peak = int(used.max()) if len(used) else 0
    elif "tier_out_bytes" in totals:
        sums = {c: int(totals[c]) for c in _SUMS}
        total, mean, peak = int(totals["tier_blocks_total"]), math.nan, int(totals["tier_blocks_max"])
    else:
        return {}
    hits = sums["tier_prefix_hit_tokens"]
    return {"kv_tier_swaps": sums["tier_swaps"], "kv_tier_recomputes": sums["tier_recomputes"],
            "kv_tier_bytes_out": sums["tier_out_bytes"], "kv_tier_bytes_in": sums["tier_in_bytes"],
            "kv_tier_prefix_hits": hits,
            "kv_tier_prefix_hit_rate": hits / queries if queries else math.nan,
            "kv_tier_capacity_blocks": total, "kv_tier_occupancy_mean": mean,
            "kv_tier_occupancy_max": peak / total if total else math.nan}
