"""Fitting cost models to timings. One folder per source of timings, each a reader of
typed observations, over one shared fit, each ending in one result and report
(fit/calibrated.py Calibrated: the profile, its report's lines, the same for --format json):

    sweep/         the backend timing sweep and its serving phase (torch): `batchlab calibrate`
    served/        served runs' step tables, read back from run folders: --from-run
    from_replay/   a server's request timings (replays, benchmark files, probes): --from-replay
    operators/     measured GPU operator tables (Vidur's layout): --from-operators
    fit/           what they share: both CPU cost forms fitted to step timings, the refit
                   on served steps, a profile's parts, the report's tables and Calibrated

    from batchlab.calibration import calibrate
    profile = calibrate("batchlab-small", "cpu", threads=1, out="small-cpu.json")

The profile model and its loader live in core/cost/profile.py (the simulator reads
profiles without importing this package). The command line is experiments/'s
(experiments/commands/calibrate.py, experiments/calibrate/): nothing here parses options
or imports experiments."""
from __future__ import annotations

__all__ = ["calibrate"]


def __getattr__(name: str):
    if name == "calibrate":  # lazy: `import calibration` stays cheap and torch-free
        from batchlab.calibration.sweep.run import calibrate  # lazy: torch
        return calibrate
    raise AttributeError(name)
