"""Two queue orders: sort keys over a sequence (core/orders in batchlab)."""
from __future__ import annotations

from batchlab.core.request import Sequence


def shortest_total(s: Sequence) -> tuple:
    """shortest prompt + output first, then arrival"""
    r = s.request
    return (r.prompt_len + r.output_len, r.arrival, r.id)


def longest_output(s: Sequence) -> tuple:
    """the request asking for the most output tokens first, then the most recently admitted"""
    return (s.request.output_len, s.admit_order)
