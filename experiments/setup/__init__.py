"""Every default and every setup step the commands and studies share, in one place:
the embedded default experiments (defaults), the engine defaults per GPU (engine), the
dtypes a preset is served in (dtypes), the roofline setup (roofline), the profile setup
(profile), the simulator's whole setup from a config (simulation) and the torch
backend's runtime (runtime). Nothing else builds a cost model or a scheduler default.

Light to import: core.profile and torch load only inside the steps that need them."""
from batchlab.experiments.setup.defaults import (CAPACITY_EXPERIMENT, REPLAY_EXPERIMENT, RUN_EXPERIMENT,
                                                 SERVE_EXPERIMENT, SIMULATE_EXPERIMENT)
from batchlab.experiments.setup.engine import EngineDefaults, apply_engine_defaults, engine_defaults
from batchlab.experiments.setup.roofline import roofline_setup
from batchlab.experiments.setup.runtime import load_runtime
from batchlab.experiments.setup.simulation import SimSetup, assumption_lines, sim_setup

__all__ = ["CAPACITY_EXPERIMENT", "REPLAY_EXPERIMENT", "RUN_EXPERIMENT", "SERVE_EXPERIMENT",
           "SIMULATE_EXPERIMENT", "EngineDefaults", "SimSetup", "apply_engine_defaults",
           "assumption_lines", "engine_defaults", "load_runtime", "roofline_setup", "sim_setup"]
