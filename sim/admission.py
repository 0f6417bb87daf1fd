"""Async scheduling's admission lag: a request the engine core receives while it is busy
joins one step later than a synchronous engine would take it.

vLLM with async scheduling keeps two batches in flight (vllm-project/vllm @ 00080ee
`vllm/v1/engine/core.py` `step_with_batch_queue`; @ 01e4fce
`vllm/v1/executor/uniproc_executor.py` `max_concurrent_batches`: 2 with async scheduling,
else 1): as step n ends it forms step n + 2, step n + 1 being formed already. A request
that would have joined the next step formed joins the one after. An engine with nothing in
flight has an empty queue and forms a step at once, so a request reaching an idle engine
waits for nothing (the simulator's replica says when it is busy: sim/engine.py)."""
from __future__ import annotations

from batchlab.core.request import Request


class AdmissionLag:
    """Requests held back, each with the count of steps started when it came: it is let in
    once one more step has started."""

    def __init__(self) -> None:
        self._held: list[tuple[Request, int]] = []

    def __bool__(self) -> bool:
        return bool(self._held)

    def hold(self, request: Request, started: int) -> None:
        self._held.append((request, started))

    def due(self, started: int) -> list[Request]:
        """The requests let in now that `started` steps have started, in arrival order."""
        held = self._held
        if not held or held[0][1] >= started:
            return []
        out = [r for r, s in held if s < started]
        self._held = [(r, s) for r, s in held if s >= started]
        return out

    def all(self) -> list[Request]:
        """Every request held (the engine would go idle: an empty queue takes them at once)."""
        out = [r for r, _ in self._held]
        self._held = []
        return out
