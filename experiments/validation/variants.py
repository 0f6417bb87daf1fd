"""The simulated variants of a validation, each a cost model (module docstring of
validate.py says what each shows):

    profile            the calibrated profile alone (the headline: a prediction)
    normalised         the profile at the machine's speed during the run as measured on
                       its own steps (experiments/machine_speed.py; core/cost_at_speed.py: a
                       fitted profile's memory side x the steady decodes' factor, its FLOP
                       terms x the compute-bound steps' factor), its memory side following
                       the run's level over time where it was measured in windows: the
                       headline's error with the machine's speed taken out
    profile+overhead   + the real run's measured time between steps
    speed-scaled       + that, and the profile scaled to the machine's speed during the
                       run: the real run's total step time over the profile's price of
                       the same steps, one factor for decode-only steps (memory-bound)
                       and one for steps with prefill (compute-bound); other work on a
                       shared machine slows the two differently
    self-fit           a linear model fitted to the run's own steps, + the overhead
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.core.batch import FEATURE_NAMES, StepFeatures
from batchlab.core.cost import CostForm, CostModel, FormDefaults, LinearCostModel
from batchlab.core.cost_at_speed import CostAtSpeed
from batchlab.core.loop_time import Overhead, fit_overhead
from batchlab.core.result import RunResult
from batchlab.core.run_meta import MachineSpeed
from batchlab.experiments.machine_speed import kind_factors, machine_speed

NAMES = ("profile", "normalised", "profile+overhead", "speed-scaled", "self-fit")


@dataclass(frozen=True)
class Scaled(FormDefaults):
    """A cost model with decode-only steps `decode` times longer, steps with prefill
    tokens `prefill` times longer (the speed-scaled diagnostic: one factor per step kind,
    not the two sides of a machine speed, core/cost_at_speed.py)."""
    base: CostModel
    decode: float
    prefill: float

    def step_time(self, f: StepFeatures) -> float:
        return self.base.step_time(f) * (self.prefill if f.prefill_tokens else self.decode)

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        # a fast-forwarded run is decode-only by construction
        return self.base.decode_run_times(f, m) * self.decode


def normalised_cost(cost: CostForm, speed: MachineSpeed | None, loop: Overhead | None) -> CostAtSpeed:
    """The normalised variant's cost model: `cost` at a run's machine speed (a fitted
    model's memory side x its factor and its FLOP terms x its compute factor, unmeasured:
    as profiled, since the two sides drift apart; another form: every step x the factor;
    no speed measured: as profiled), plus the profile's loop time between steps. Where the
    run measured its memory side's level in windows of its clock (drift_levels), the memory
    side follows it window by window and the FLOP terms keep the run's compute factor:
    moving them with the windows too judged the stored study runs worse, the compute side
    drifting otherwise (docs/validation.md)."""
    speed = speed or MachineSpeed()
    return CostAtSpeed(cost, speed.factor or 1.0, speed.compute_factor, speed.windows, loop)


def fit_linear_cost(run: RunResult) -> LinearCostModel:
    """LinearCostModel over FEATURE_NAMES least-squares fitted to a run's own step
    durations, coefficients >= 0 (so no step is priced below zero)."""
    from scipy.optimize import nnls

    st = run.steps
    x = np.column_stack([np.ones(len(st["duration_s"]))] + [st[n].astype(float) for n in FEATURE_NAMES])
    scale = np.maximum(np.abs(x).max(axis=0), 1.0)  # conditioning: features span 1..1e6
    coef = nnls(x / scale, st["duration_s"])[0] / scale
    return LinearCostModel(float(coef[0]), {n: float(c) for n, c in zip(FEATURE_NAMES, coef[1:])})


def variant_costs(real: RunResult, profile_cost: CostModel,
                  loop: Overhead | None = None) -> tuple[dict[str, CostModel], dict]:
    """The cost model of each variant, and what was fitted on the real run. loop: the
    profile's time between steps (Profile.loop_overhead), part of what it predicts, so in
    the headline and normalised variants; the diagnostics use the run's own instead."""
    overhead = fit_overhead(real)
    k = kind_factors(real.steps, profile_cost)
    speed = real.meta.machine_speed or machine_speed(real.steps, profile_cost)
    costs = {"profile": CostAtSpeed(profile_cost, loop=loop),
             "normalised": normalised_cost(profile_cost, speed, loop),
             "profile+overhead": CostAtSpeed(profile_cost, loop=overhead),
             "speed-scaled": CostAtSpeed(Scaled(profile_cost, k["decode"], k["prefill"]), loop=overhead),
             "self-fit": CostAtSpeed(fit_linear_cost(real), loop=overhead)}
    return costs, {"overhead": overhead, "speed_factor": k, "machine_speed": speed}
