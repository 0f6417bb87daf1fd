"""The normalised variant's cost model: the profile at the machine's speed during a real
run, as measured on the run's own steps (experiments/machine_speed.py), plus the
profile's loop time between steps. Simulated and compared with that run, it is the
headline's error with the machine's speed taken out: how well the cost model's shape
predicts, whatever the machine's mood."""
from __future__ import annotations

from batchlab.core.cost.form import CostForm
from batchlab.core.cost.at_speed import CostAtSpeed
from batchlab.core.cost.loop_time import Overhead
from batchlab.core.run_meta import MachineSpeed


def normalised_cost(cost: CostForm, speed: MachineSpeed | None, loop: Overhead | None) -> CostAtSpeed:
    """`cost` at a run's machine speed (core/cost/at_speed.py: a fitted model's memory
    side x its factor and its FLOP terms x its compute factor, unmeasured: as profiled,
    since the two sides drift apart; another form: every step x the factor; no speed
    measured: as profiled), plus the profile's loop time between steps. Where the run
    measured its memory side's level in windows of its clock (drift_levels), the memory
    side follows it window by window and the FLOP terms keep the run's compute factor:
    moving them with the windows too judged the stored study runs worse, the compute side
    drifting otherwise (docs/validation.md)."""
    speed = speed or MachineSpeed()
    return CostAtSpeed(cost, speed.factor or 1.0, speed.compute_factor, speed.windows, loop)
