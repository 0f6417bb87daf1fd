"""A cost model at a machine's measured speed, plus the serving loop's time between steps:
the one price the simulator gets whenever more than a bare cost form is meant.

    CostAtSpeed(profile.cost_model(), loop=profile.loop_overhead())   # Profile.simulation_cost
    CostAtSpeed(cost, memory=1.1, compute=0.9, windows=((0.0, 1.05), (2.0, 1.2)), loop=loop)

- base: a cost form (core/cost/form.py CostForm: roofline, linear, fitted), as it was measured.
- memory: the level of its memory side (fixed costs, weight and KV traffic) during a run,
  the run's mean; > 1: the machine ran slower than when the base was measured.
- compute: the level of its compute side (FLOP terms); None: as priced.
- windows: (start_s, memory level) per window of the run's clock, starts ascending. A shared
  machine's speed moves within a run; a step, or a fast-forwarded run of decodes, starting
  at `now` is priced at the level of the window it starts in (at(now); before the first
  window, the first one's), the compute level kept. A caller without a clock gets the mean.
- loop: the serving loop's time between steps (core/cost/loop_time.py Overhead), added to each
  step: a simulated step then lasts as long as the real loop's period.

How a form splits and scales its two sides is the form's own (CostForm.at_speed), so this
class never asks what its base is. The levels come from a real run (the measurement lives
with the code that judges runs: experiments/machine_speed.py), or are 1 (as profiled).
Every price is the form's own at that level plus the loop, in a fixed order of operations,
so stepping and fast-forwarding stay equal bit for bit."""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from batchlab.core.cost.form import CostForm, CostModel, stretch_times, window_stretch_times
from batchlab.core.features import StepFeatures
from batchlab.core.run_clock import RunClock
from batchlab.core.cost.loop_time import Overhead


@dataclass(frozen=True)
class CostAtSpeed:
    base: CostForm
    memory: float = 1.0
    compute: float | None = None
    windows: tuple[tuple[float, float], ...] = ()
    loop: Overhead | None = None
    # Derived once: the base at the mean level, and one CostAtSpeed per window.
    _price: CostModel = field(init=False, repr=False, compare=False)
    _starts: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _by_window: tuple["CostAtSpeed", ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        starts = tuple(float(t) for t, _ in self.windows)
        if list(starts) != sorted(starts):
            raise ValueError("CostAtSpeed windows: one (start_s, level) per window, starts ascending")
        as_profiled = self.memory == 1.0 and self.compute is None
        price = self.base if as_profiled else self.base.at_speed(self.memory, self.compute)
        object.__setattr__(self, "_price", price)
        object.__setattr__(self, "_starts", starts)
        object.__setattr__(self, "_by_window", tuple(
            CostAtSpeed(self.base, float(level), self.compute, (), self.loop) for _, level in self.windows))

    def at(self, now: float) -> CostModel:
        if not self._by_window:
            return self
        return self._by_window[max(0, bisect_right(self._starts, now) - 1)]

    def step_time(self, f: StepFeatures) -> float:
        t = self._price.step_time(f)
        o = self.loop
        return t if o is None else t + o.per_step_s + o.per_seq_s * f.num_seqs

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        t = self._price.decode_run_times(f, m)
        o = self.loop
        # step_time's order of operations, step by step: a run priced whole and the same
        # run cut into pieces (or stepped) land on the same bits.
        return t if o is None else t + o.per_step_s + o.per_seq_s * f.num_seqs

    def decode_times(self, n: int, kv0: int, m: int) -> list[float]:
        if self.loop is None:
            return self._price.decode_times(n, kv0, m)
        return stretch_times(self, n, kv0, m)

    def decode_into(self, clock: RunClock, n: int, kv0: int, m: int) -> None:
        if self.loop is None:
            self._price.decode_into(clock, n, kv0, m)
        else:
            clock.extend(stretch_times(self, n, kv0, m))

    def window_decode_times(self, n: int, kv0: int, w0: int, u: int, m: int) -> list[float]:
        if self.loop is None:
            return self._price.window_decode_times(n, kv0, w0, u, m)
        return window_stretch_times(self, n, kv0, w0, u, m)
