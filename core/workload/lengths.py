"""Token-length distributions for synthetic workloads."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from batchlab.core.checks import MAX_TOKENS, LengthMean, Positive, Sigma, Tokens
from batchlab.core.workload.formats import load_trace

CHOOSE_MAX = 32  # np.choose's most choices (numpy 1.x; 64 from 2.0)
# From this many requests, independent streams are drawn side by side (numpy lets go of
# the GIL while it draws): the workload is built before a split run's workers start.
THREADED_DRAWS = 200_000


class LengthSpec(BaseModel):
    """fixed(value) | uniform(low, high, inclusive) | lognormal(mean, sigma) |
    mixture(components with weights) | file(path, column): drawn with replacement from
    one column of a trace or length file; results are clipped to [min, max]."""
    model_config = ConfigDict(extra="forbid")

    dist: Literal["fixed", "uniform", "lognormal", "mixture", "file"] = "fixed"
    value: Tokens | None = None
    low: Tokens | None = None
    high: Tokens | None = None
    mean: LengthMean | None = Field(None, description="lognormal: mean in tokens")
    sigma: Sigma | None = Field(None, description="lognormal: std of log-length")
    components: list["LengthSpec"] | None = Field(None, min_length=1)
    weight: Positive = Field(1.0, description="weight within a mixture")
    path: str | None = Field(None, description="file: a trace or length file (any format)")
    column: Literal["prompt", "output"] | None = Field(
        None, description="file: which lengths to draw (a length file's num_prefill_tokens "
                          "or num_decode_tokens, a trace's prompt or output lengths)")
    min: Tokens = 1
    max: Tokens | None = None

    @model_validator(mode="after")
    def _check(self) -> "LengthSpec":
        need = {"fixed": ("value",), "uniform": ("low", "high"), "lognormal": ("mean", "sigma"),
                "mixture": ("components",), "file": ("path", "column")}[self.dist]
        missing = [f for f in need if getattr(self, f) is None]
        if missing:
            raise ValueError(f"dist={self.dist!r} needs {', '.join(missing)}")
        if self.dist == "uniform" and self.low > self.high:
            raise ValueError(f"uniform needs low <= high, got {self.low} > {self.high}")
        if self.dist == "mixture" and not np.isfinite(sum(c.weight for c in self.components)):
            raise ValueError("mixture weights must have a finite sum")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) < min ({self.min})")
        return self

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n lengths; prefix-stable: the first k of n equal sample(k) from the same rng state."""
        if self.dist == "fixed":
            x = np.full(n, self.value, dtype=np.int64)
        elif self.dist == "uniform":
            x = rng.integers(self.low, self.high + 1, size=n)
        elif self.dist == "lognormal":
            mu = np.log(self.mean) - self.sigma**2 / 2
            # Clipped while a float: a draw beyond int64 would wrap to a negative count.
            # (In place: each pass a temporary of n fewer.)
            y = rng.lognormal(mu, self.sigma, size=n)
            x = np.rint(np.minimum(y, MAX_TOKENS, out=y), out=y).astype(np.int64)
        elif self.dist == "file":
            col = self.file_lengths()
            x = col[rng.integers(0, len(col), size=n)]
        else:
            # Prefix-stable: request i's length must not depend on n. Drawing each
            # component only for its members would shift every stream with n, so each
            # component draws n values from its own child stream and request i takes
            # the i-th value of the component it picked.
            w = np.array([c.weight for c in self.components])
            which = rng.choice(len(w), size=n, p=w / w.sum())
            children = rng.spawn(len(self.components))
            drawn = (comp.sample(n, child) for comp, child in zip(self.components, children))
            if len(self.components) <= CHOOSE_MAX:  # each request's pick in one pass
                x = np.choose(which, list(drawn))
            else:
                x = np.empty(n, dtype=np.int64)
                for k, col in enumerate(drawn):
                    np.copyto(x, col, where=which == k)
        return self.clip(x, own=True)

    def clip(self, x: np.ndarray, own: bool = False) -> np.ndarray:
        """x within [min, max], as int64; own: x is the caller's to overwrite (an int64
        array made for this: clipped in place)."""
        if own and x.dtype == np.int64:
            return np.clip(x, self.min, self.max, out=x)
        return np.clip(x, self.min, self.max if self.max is not None else None).astype(np.int64)

    def file_lengths(self) -> np.ndarray:
        """dist=file: the whole column (read once per file version, read-only)."""
        return _file_columns(self.path, _mtime(self.path))[0 if self.column == "prompt" else 1]


def sample_lengths(prompt: LengthSpec, output: LengthSpec, n: int, prompt_rng: np.random.Generator,
                   output_rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths for n requests. When both are drawn from the same file,
    whole rows are drawn, so each request keeps its prompt/output pairing."""
    if prompt.dist == output.dist == "file" and prompt.path == output.path:
        p, o = prompt.file_lengths(), output.file_lengths()
        rows = prompt_rng.integers(0, len(p), size=n)
        return prompt.clip(p[rows], own=True), output.clip(o[rows], own=True)
    if n < THREADED_DRAWS:
        return prompt.sample(n, prompt_rng), output.sample(n, output_rng)
    with ThreadPoolExecutor(1) as beside:  # two generators of their own: the same draws
        outputs = beside.submit(output.sample, n, output_rng)
        return prompt.sample(n, prompt_rng), outputs.result()


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1  # the loader reports the missing file


@lru_cache(maxsize=8)
def _file_columns(path: str, _mtime_ns: int) -> tuple[np.ndarray, np.ndarray]:
    w = load_trace(path)
    for col in (w.prompt_len, w.output_len):
        col.flags.writeable = False  # shared by every caller of the cache
    return w.prompt_len, w.output_len
