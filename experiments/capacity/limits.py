"""Axis limits that never collapse: where every value ties (one point, or equal costs),
a window around the value instead of matplotlib's zero-width (degenerate) axis."""
from __future__ import annotations


def spread_limits(values: list[float]) -> tuple[float, float] | None:
    """+-10% around values that all tie (+-1 at 0); None where they spread (matplotlib's
    own limits then)."""
    if not values or max(values) > min(values):
        return None
    v = values[0]
    pad = abs(v) * 0.1 or 1.0
    return v - pad, v + pad
