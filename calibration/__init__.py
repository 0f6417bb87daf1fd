"""Timing sweeps on the backend, cost-model fitting, saved profiles.

    from batchlab.calibration import calibrate
    profile = calibrate("batchlab-small", "cpu", threads=1, out="small-cpu.json")

The profile model and its loader live in core.profile (the simulator reads profiles
without importing this package, which needs torch)."""
from __future__ import annotations

__all__ = ["calibrate"]


def __getattr__(name: str):
    if name == "calibrate":  # lazy: `import calibration` stays cheap and torch-free
        from batchlab.calibration.run import calibrate
        return calibrate
    raise AttributeError(name)
