"""The built-in preemption victim orders (larger key = preempted first). Compiled, as
admission.py is: descriptions go to the decorator."""
from __future__ import annotations

from batchlab.core.orders import victim_order
from batchlab.core.request import Sequence


@victim_order("recent",
              "the most recently admitted sequence first (vLLM's recompute order)", admission_ordered=True)
def recent(s: Sequence) -> tuple:
    return (s.admit_order,)


@victim_order("priority",
              "the lowest priority (largest value) first, then the most recently admitted")
def priority(s: Sequence) -> tuple:
    return (s.request.priority, s.admit_order)
