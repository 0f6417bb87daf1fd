"""The built-in admission orders (smaller key = admitted first). Compiled with the hot
path (batchlab/_compiled.py), which drops function docstrings: each description is given
to the decorator, where --list-policies reads it."""
from __future__ import annotations

from batchlab.core.orders import admission_order
from batchlab.core.request import Sequence

# Waiting this long outranks one priority level (priority_aging).
AGING_S_PER_LEVEL = 10.0


@admission_order("fcfs",
                 "first come, first served (vLLM's default)")
def fcfs(s: Sequence) -> tuple:
    return (s.request.arrival, s.request.id)


@admission_order("priority",
                 "lowest priority value first (vLLM's --scheduling-policy priority), then arrival")
def priority(s: Sequence) -> tuple:
    return (s.request.priority, s.request.arrival, s.request.id)


@admission_order("shortest_prompt",
                 "shortest prompt first, then arrival")
def shortest_prompt(s: Sequence) -> tuple:
    return (s.request.prompt_len, s.request.arrival, s.request.id)


@admission_order("shortest_output",
                 "shortest output first (shortest job first with a perfect length predictor: the "
                 "request's own output_len), then arrival")
def shortest_output(s: Sequence) -> tuple:
    return (s.request.output_len, s.request.arrival, s.request.id)


@admission_order("priority_aging",
                 "priority with aging: by arrival + 10 s per priority level, so a low-priority "
                 "request waits at most 10 s per level behind later important ones, never forever")
def priority_aging(s: Sequence) -> tuple:
    r = s.request
    return (r.arrival + AGING_S_PER_LEVEL * r.priority, r.arrival, r.id)
