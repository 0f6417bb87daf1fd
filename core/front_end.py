"""A server's front end: what lies between a client's send and the engine seeing the
request (HTTP, parsing, tokenising). A client's TTFT holds it and the engine's does not,
so a profile fitted from request timings (calibrate --from-replay / --endpoint) carries
it, and the simulator puts it in front of the engine wherever latency is meant as a client
measures it.

It is a fixed delay a request plus a single-server queue of its own handling time: a
burst sent at once reaches the engine one by one,

    exit_i = max(send_i + delay, exit_(i-1)) + serial      (sends in order)

The request keeps its send time as its arrival, so TTFT and E2E are from the send."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FrontEnd:
    delay_s: float = 0.0  # every request, send to the front end's queue
    serial_s: float = 0.0  # the front end's own work a request, one request at a time

    def __post_init__(self) -> None:
        for name in ("delay_s", "serial_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"front end {name} must be a finite number >= 0, got {v!r}")

    @property
    def empty(self) -> bool:
        return self.delay_s == 0 and self.serial_s == 0

    def exit_after(self, previous_exit: float, send: float) -> float:
        """When a request sent at `send` reaches the engine, the one before it having
        left the front end at `previous_exit` (-inf: none)."""
        return max(send + self.delay_s, previous_exit) + self.serial_s

    def arrivals(self, send: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(engine arrival, requests queued ahead in the front end) of each request (sends
        non-decreasing). d arrival / d serial = 1 + queued ahead."""
        arrival, ahead = np.empty(len(send)), np.zeros(len(send))
        prev, chain = -math.inf, 0
        for i, t in enumerate(send):
            start = t + self.delay_s
            chain = chain + 1 if prev > start else 0
            prev = self.exit_after(prev, float(t))
            arrival[i], ahead[i] = prev, chain
        return arrival, ahead
