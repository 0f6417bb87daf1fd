"""A finished run (simulated or real): the two tables, the inter-token gaps, metadata."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from core.metrics import MetricsRecorder
from core.summary import SLO, step_totals, summarize


@dataclass
class RunResult:
    requests: dict[str, np.ndarray]
    steps: dict[str, np.ndarray] | None  # None when the run kept totals only
    itl_gaps: np.ndarray  # inter-token gaps (s); itl_counts[i] tokens had gap itl_gaps[i]
    itl_counts: np.ndarray
    meta: dict = field(default_factory=dict)  # what ran: policy, model, hardware, seed, ...
    totals: dict = field(default_factory=dict)  # step totals, for runs without a step table

    @classmethod
    def from_recorder(cls, rec: MetricsRecorder, meta: dict | None = None) -> "RunResult":
        return cls(rec.request_table(), rec.step_table(), *rec.itl(), meta or {}, dict(rec.totals))

    @property
    def itl(self) -> np.ndarray:
        """Every inter-token gap, one value per token (large: prefer itl_gaps/itl_counts)."""
        return np.repeat(self.itl_gaps, self.itl_counts)

    def summary(self, slo: SLO | None = None) -> dict[str, float]:
        totals = step_totals(self.steps) if self.steps is not None else self.totals
        return summarize(self.requests, totals, (self.itl_gaps, self.itl_counts), slo)
