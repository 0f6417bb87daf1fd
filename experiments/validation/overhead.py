"""Time outside forward passes in a real run: where its wall time went. The gaps between
steps, and their fit, are core/loop_time.py's (the simulator prices them from a profile
too; validate's profile+overhead variant uses the real run's own)."""
from __future__ import annotations

import math

from batchlab.core.result import RunResult


def outside_forward(real: RunResult) -> dict[str, float]:
    """Where the real run's wall time went (driver metadata), with shares of the wall."""
    m = real.meta
    wall = float(_or(m.wall_s, math.nan))
    steps = int(_or(m.steps, len(real.steps["start_s"])))
    parts = {"forward_s": _or(m.engine_forward_s, math.nan),
             "input_prep_s": _or(m.engine_prepare_s, math.nan),
             "scheduler_overhead_s": _or(m.scheduler_overhead_s, math.nan),
             "idle_s": _or(m.idle_s, math.nan)}
    out: dict[str, float] = {"wall_s": wall, "steps": steps, **parts}
    for k, v in parts.items():
        out[k[:-2] + "_share"] = v / wall if wall else math.nan
    out["outside_forward_ms_per_step"] = (
        1e3 * (parts["input_prep_s"] + parts["scheduler_overhead_s"]) / steps if steps else math.nan)
    return out


def _or(recorded, otherwise):
    """A meta field, or `otherwise` where the run did not record it."""
    return otherwise if recorded is None else recorded
