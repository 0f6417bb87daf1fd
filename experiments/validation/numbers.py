"""How validation's tables write an error and a measured value."""
from __future__ import annotations

import math


def pct(x: float | None, signed: bool = True) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%"


def num(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:,.2f}" if abs(x) < 100 else f"{x:,.0f}" if abs(x) >= 10000 else f"{x:,.1f}"
