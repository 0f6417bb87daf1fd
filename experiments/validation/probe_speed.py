"""The server's speed during an endpoint's replay, as its client can measure it.

A client sees no step table, so experiments/machine_speed.py cannot level its runs; yet a
shared machine's speed moves between replays minutes apart (by 17-26% on this project's
VMs, docs/results/2026-12-06-engineers-loop.md), more than a replay's own spread. So
`validate --endpoint` times a probe on the idle server before the first replay and after
each one: PROBE's requests one at a time, each decoding alone. Their mean TPOT over the
profile's mean TPOT of the same requests (simulated the same way) is the memory side's
level, the same quantity machine_speed measures on steady decode steps; a replay's factor
is the mean of the probes on either side of it. The compute side (prefill FLOPs) is not
probed: the normalised simulation prices it as profiled."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchlab.core.result import RunResult
from batchlab.core.run_meta import MachineSpeed
from batchlab.core.workload import Workload

PROBE_REQUESTS, PROBE_PROMPT, PROBE_OUTPUT = 3, 32, 64
PROBE = Workload(np.zeros(PROBE_REQUESTS), np.full(PROBE_REQUESTS, PROBE_PROMPT),
                 np.full(PROBE_REQUESTS, PROBE_OUTPUT), description=["speed probe"], max_concurrency=1)
METHOD = (f"idle probe: {PROBE_REQUESTS} requests one at a time ({PROBE_PROMPT} tokens in, {PROBE_OUTPUT} out) "
          f"before and after the replay, their mean TPOT over the profile's")


@dataclass(frozen=True)
class ProbeTimes:
    """The probe's mean TPOT (s) on the idle server just before and just after one replay."""
    before_s: float
    after_s: float


def mean_tpot_s(result: RunResult) -> float:
    """The probe's mean TPOT in seconds (NaN where no request of it finished)."""
    ms = result.summary().get("mean_tpot_ms")
    return float(ms) / 1e3 if ms is not None and math.isfinite(ms) else math.nan


def probe_speed(times: ProbeTimes, priced_tpot_s: float, source: str) -> MachineSpeed:
    """A replay's memory-side factor from the probes around it; None (and why) where a probe
    did not finish or the profile prices it at 0."""
    out = {"method": METHOD, "profile": source or None, "steps": 0}
    measured = (times.before_s + times.after_s) / 2
    if not math.isfinite(measured) or measured <= 0:
        return MachineSpeed(**out, why="a speed probe did not finish")
    if not priced_tpot_s > 0:
        return MachineSpeed(**out, why="the profile prices the speed probe at 0 s")
    return MachineSpeed(**out, factor=measured / priced_tpot_s,  # unrounded: levelled exactly
                        spread=round(abs(times.after_s - times.before_s) / measured, 4))
