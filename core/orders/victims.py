"""The built-in preemption victim orders (larger key = preempted first)."""
from __future__ import annotations

from batchlab.core.orders import victim_order
from batchlab.core.request import Sequence


@victim_order("recent", admission_ordered=True)
def recent(s: Sequence) -> tuple:
    """the most recently admitted sequence first (vLLM's recompute order)"""
    return (s.admit_order,)


@victim_order("priority")
def priority(s: Sequence) -> tuple:
    """the lowest priority (largest value) first, then the most recently admitted"""
    return (s.request.priority, s.admit_order)
