"""Token-length distributions for synthetic workloads."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator


class LengthSpec(BaseModel):
    """fixed(value) | uniform(low, high, inclusive) | lognormal(mean, sigma) |
    mixture(components with weights); results are clipped to [min, max]."""
    model_config = ConfigDict(extra="forbid")

    dist: Literal["fixed", "uniform", "lognormal", "mixture"] = "fixed"
    value: int | None = Field(None, ge=1)
    low: int | None = Field(None, ge=1)
    high: int | None = Field(None, ge=1)
    mean: float | None = Field(None, gt=0, description="lognormal: mean in tokens")
    sigma: float | None = Field(None, ge=0, description="lognormal: std of log-length")
    components: list["LengthSpec"] | None = None
    weight: float = Field(1.0, gt=0, description="weight within a mixture")
    min: int = Field(1, ge=1)
    max: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _check(self) -> "LengthSpec":
        need = {"fixed": ("value",), "uniform": ("low", "high"), "lognormal": ("mean", "sigma"),
                "mixture": ("components",)}[self.dist]
        missing = [f for f in need if getattr(self, f) is None]
        if missing:
            raise ValueError(f"dist={self.dist!r} needs {', '.join(missing)}")
        if self.dist == "uniform" and self.low > self.high:
            raise ValueError(f"uniform needs low <= high, got {self.low} > {self.high}")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) < min ({self.min})")
        return self

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.dist == "fixed":
            x = np.full(n, self.value, dtype=np.int64)
        elif self.dist == "uniform":
            x = rng.integers(self.low, self.high + 1, size=n)
        elif self.dist == "lognormal":
            mu = np.log(self.mean) - self.sigma**2 / 2
            x = np.rint(rng.lognormal(mu, self.sigma, size=n)).astype(np.int64)
        else:
            w = np.array([c.weight for c in self.components])
            which = rng.choice(len(w), size=n, p=w / w.sum())
            x = np.empty(n, dtype=np.int64)
            for k, comp in enumerate(self.components):
                idx = np.flatnonzero(which == k)
                x[idx] = comp.sample(len(idx), rng)
        return np.clip(x, self.min, self.max if self.max is not None else None).astype(np.int64)
