"""How validation's reports write an error, a measured value, and each run's machine speed."""
from __future__ import annotations

import math

from batchlab.experiments.markdown import fmt


def pct(x: float | None, signed: bool = True) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%"


def speeds(memory: list[float | None], compute: list[float | None] | None, digits: int = 3) -> str:
    """Each run's measured machine speed, memory side / compute side ('-': not
    measured; no compute list: records from before the compute side was measured)."""
    spec = f"{{:.{digits}f}}"
    pairs = zip(memory, compute or [None] * len(memory))
    return ", ".join(f"{fmt(k, spec)}/{fmt(c, spec)}" for k, c in pairs)


def drifts(values: list[float | None] | None) -> str:
    """How far each run's level moved within it (experiments.machine_speed.drift): '12%, -, 30%';
    '' where no run has the figure."""
    if not values or all(d is None for d in values):
        return ""
    return ", ".join("-" if d is None else f"{d * 100:.0f}%" for d in values)
