"""How validation's tables write an error and a measured value."""
from __future__ import annotations

import math

from batchlab.experiments.machine_speed import DRIFT_WINDOW_S


def pct(x: float | None, signed: bool = True) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%"


def num(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:,.2f}" if abs(x) < 100 else f"{x:,.0f}" if abs(x) >= 10000 else f"{x:,.1f}"


def drift_text(ms: dict) -> str:
    """How far a run's machine speed moved within it (experiments.machine_speed.drift), as a clause."""
    if ms.get("drift") is None:
        return ""
    lo, hi = ms["drift_range"]
    return (f", moving {lo:.2f}-{hi:.2f} within the run (p10-p90 of {ms['drift_windows']} "
            f"windows of {DRIFT_WINDOW_S:g} s: {ms['drift'] * 100:.0f}% of the mean)")
