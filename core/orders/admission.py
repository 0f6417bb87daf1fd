"""The built-in admission orders (smaller key = admitted first)."""
from __future__ import annotations

from batchlab.core.orders import admission_order
from batchlab.core.request import Sequence

# Waiting this long outranks one priority level (priority_aging).
AGING_S_PER_LEVEL = 10.0


@admission_order("fcfs")
def fcfs(s: Sequence) -> tuple:
    """first come, first served (vLLM's default)"""
    return (s.request.arrival, s.request.id)


@admission_order("priority")
def priority(s: Sequence) -> tuple:
    """lowest priority value first (vLLM's --scheduling-policy priority), then arrival"""
    return (s.request.priority, s.request.arrival, s.request.id)


@admission_order("shortest_prompt")
def shortest_prompt(s: Sequence) -> tuple:
    """shortest prompt first, then arrival"""
    return (s.request.prompt_len, s.request.arrival, s.request.id)


@admission_order("shortest_output")
def shortest_output(s: Sequence) -> tuple:
    """shortest output first (shortest job first with a perfect length predictor: the
    request's own output_len), then arrival"""
    return (s.request.output_len, s.request.arrival, s.request.id)


@admission_order("priority_aging")
def priority_aging(s: Sequence) -> tuple:
    """priority with aging: by arrival + 10 s per priority level, so a low-priority
    request waits at most 10 s per level behind later important ones, never forever"""
    r = s.request
    return (r.arrival + AGING_S_PER_LEVEL * r.priority, r.arrival, r.id)
