"""The linear form: an intercept plus a coefficient per step feature (tests and quick
fits; the calibrated forms are core/cost/fitted.py and core/cost/cpu_form.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from batchlab.core.cost.form import FormDefaults, growing
from batchlab.core.features import FEATURE_NAMES, StepFeatures


@dataclass(frozen=True, slots=True)
class LinearCostModel(FormDefaults):
    """intercept + sum(coef[name] * feature[name]) over FEATURE_NAMES (missing = 0); at a
    measured speed the whole step is slowed (it does not split the two sides)."""

    intercept: float
    coef: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.coef) - set(FEATURE_NAMES)
        if unknown:
            raise ValueError(f"unknown cost features {sorted(unknown)}; expected {FEATURE_NAMES}")

    def step_time(self, f: StepFeatures) -> float:
        return self.intercept + sum(c * getattr(f, n) for n, c in self.coef.items())

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        kv, pairs = growing(f, m)
        grown = {"kv_tokens_read": kv, "attention_pairs": pairs}
        later = f._replace(after_prefill=0, after_idle=0)  # the context is the first step's
        total: Any = 0  # a number or an array (compiled: not checked as an int)
        for n, c in self.coef.items():
            total = total + c * grown.get(n, getattr(later, n))
        t = self.intercept + np.broadcast_to(total, (m,)).astype(float)
        if m and (f.after_prefill or f.after_idle):
            t[0] = self.step_time(f._replace(kv_tokens_read=int(kv[0]), attention_pairs=int(pairs[0])))
        return t
