"""A finished run (simulated or real): the two tables, the inter-token gaps, metadata."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from core.metrics import MetricsRecorder
from core.summary import SLO, summarize


@dataclass
class RunResult:
    requests: dict[str, np.ndarray]
    steps: dict[str, np.ndarray]
    itl: np.ndarray
    meta: dict = field(default_factory=dict)  # what ran: policy, model, hardware, seed, ...

    @classmethod
    def from_recorder(cls, rec: MetricsRecorder, meta: dict | None = None) -> "RunResult":
        return cls(rec.request_table(), rec.step_table(), np.frombuffer(rec.itl).copy(), meta or {})

    def summary(self, slo: SLO | None = None) -> dict[str, float]:
        return summarize(self.requests, self.steps, self.itl, slo)
