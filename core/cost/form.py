"""What every price is: the CostModel the simulator asks (a step's seconds, a decode
run's), the CostForm a measured speed wraps, and the defaults most forms share."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, cast

import numpy as np
from mypy_extensions import mypyc_attr

from batchlab.core.features import StepFeatures, features_of
from batchlab.core.run_clock import RunClock

class CostModel(Protocol):
    """Everything the simulator asks of a price (sim/engine.py, core/fast_forward.py)."""

    def step_time(self, f: StepFeatures) -> float:
        """Seconds of one step of shape f."""

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        """step_time of m steady decode steps starting with f: kv_tokens_read and
        attention_pairs grow by num_seqs a step; f's context features (after_prefill,
        after_idle) are its own, the later steps follow a decode. Bit for bit equal to
        step_time, step by step (the fast-forward relies on it)."""

    def decode_times(self, n: int, kv0: int, m: int) -> list[float]:
        """step_time of m decode-only steps of n sequences reading kv0, kv0 + n, ... KV
        tokens, in whichever form is cheapest for m (stretch_times is the usual one)."""

    def decode_into(self, clock: RunClock, n: int, kv0: int, m: int) -> None:
        """decode_times' steps onto a run's clock (core/run_clock.py), the same bits: a
        price linear in its KV read gives its line, no Python float a step."""

    def window_decode_times(self, n: int, kv0: int, w0: int, u: int, m: int) -> list[float]:
        """decode_times for a model with a sliding window: the steps' windowed KV reads (and
        pairs) are w0, w0 + u, ... (u: the sequences still inside the window). Bit for bit
        equal to step_time (window_stretch_times is the plain form)."""

    def at(self, now: float) -> "CostModel":
        """The price of a step (or a fast-forwarded run) starting at `now` on the run's
        clock: itself, unless its level moves with the clock (core/cost_at_speed.py)."""


class CostForm(CostModel, Protocol):
    """A concrete cost form (roofline, linear, fitted): what a CostAtSpeed wraps."""

    def at_speed(self, memory: float, compute: float | None = None) -> CostModel:
        """This form as the machine ran at measured speeds: its memory side (fixed costs,
        weight and KV traffic) `memory` times as slow, its compute side `compute` times
        (None: as priced). How the two sides split is the form's own business."""


# Stretches of decode steps shorter than this are priced step by step, longer ones by
# one numpy call (decode_run_times), which costs more to set up.
SHORT_STEPS = 6


def stretch_times(cost: CostModel, n: int, kv0: int, m: int) -> list[float]:
    """`cost`'s decode_times: step by step when the stretch is short, else vectorised."""
    if m < SHORT_STEPS:
        return [cost.step_time(StepFeatures(n, 0, 0, n, kv, kv)) for kv in range(kv0, kv0 + m * n, n)]
    return cost.decode_run_times(StepFeatures(n, 0, 0, n, kv0, kv0), m).tolist()


def window_stretch_times(cost: CostModel, n: int, kv0: int, w0: int, u: int, m: int) -> list[float]:
    """`cost`'s window_decode_times, step by step: exact for any form."""
    out: list[float] = []
    for j in range(m):  # a for statement: compiled, a comprehension's range is a Python call
        kv, w = kv0 + j * n, w0 + j * u
        out.append(cost.step_time(features_of(n, 0, 0, n, kv, kv, 0, 0, 0, w, w, 0, 0)))
    return out


def line_times(fixed: float, kv_coef: float, pair_coef: float, w_kv_coef: float, w_pair_coef: float,
               windowed: bool, n: int, kv0: int, w0: int, u: int, m: int) -> list[float]:
    """m decode steps of a price linear in its reads: fixed + (kv_coef * kv + pair_coef * kv
    [+ w_kv_coef * w + w_pair_coef * w]) with kv = kv0 + j n and w = w0 + j u, in that
    order of operations (a form's own arithmetic: core/cost/gpu_deployment.py); compiled."""
    out: list[float] = []
    for j in range(m):  # a for statement: compiled, a comprehension's range is a Python call
        kv = kv0 + j * n
        attn = kv_coef * kv + pair_coef * kv
        if windowed:
            w = w0 + j * u
            attn = attn + w_kv_coef * w + w_pair_coef * w
        out.append(fixed + attn)
    return out


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (setup.py): other forms extend it
class FormDefaults:
    """The CostModel methods most forms share: decode stretches priced by stretch_times (and
    onto a run's clock as decode_times prices them), one level whatever the clock (at: itself), and at a measured speed every step slowed
    as a whole (at_speed: Slowed). A form overrides what it does otherwise."""
    __slots__ = ()

    def decode_times(self, n: int, kv0: int, m: int) -> list[float]:
        return stretch_times(cast(CostModel, self), n, kv0, m)

    def decode_into(self, clock: RunClock, n: int, kv0: int, m: int) -> None:
        clock.extend(self.decode_times(n, kv0, m))

    def window_decode_times(self, n: int, kv0: int, w0: int, u: int, m: int) -> list[float]:
        return window_stretch_times(cast(CostModel, self), n, kv0, w0, u, m)

    def at(self, now: float) -> CostModel:
        return cast(CostModel, self)

    def decode_reads_context(self) -> bool:
        """Whether a decode-only step's price reads its context (after_prefill,
        after_idle): False lets a run's first step be priced on its stretch's line."""
        return True

    def at_speed(self, memory: float, compute: float | None = None) -> CostModel:
        return Slowed(cast(CostModel, self), memory)


@dataclass(frozen=True, slots=True)
class Slowed(FormDefaults):
    """Every step of `base` `factor` times as long: a cost form at a measured speed where
    the form does not split its memory and compute sides for the measurement (roofline,
    linear: experiments/machine_speed.py measures a compute side on a fitted profile's FLOP
    terms only)."""
    base: CostModel
    factor: float

    def step_time(self, f: StepFeatures) -> float:
        return self.base.step_time(f) * self.factor

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        return self.base.decode_run_times(f, m) * self.factor


def attention_window(cost: CostModel) -> int:
    """The sliding window of the model `cost` prices (0: none), through any wrappers
    (CostAtSpeed, Slowed: their `base`): the simulator computes the windowed step
    features with it."""
    wrapped: object = cost
    while wrapped is not None:
        window = getattr(wrapped, "window", 0)
        if window:
            return window
        wrapped = getattr(wrapped, "base", None)
    return 0


def growing(f: StepFeatures, m: int) -> tuple[np.ndarray, np.ndarray]:
    """kv_tokens_read and attention_pairs of m steady decode steps: each of the
    num_seqs sequences attends one more token per step."""
    grow = np.arange(m, dtype=np.int64) * f.num_seqs
    return f.kv_tokens_read + grow, f.attention_pairs + grow
