"""What every calibration source hands back, and how it reads: the one report.

A source (sweep/, served/, from_replay/, operators/, served_bench/) reads its timings, fits, and ends in a
`Calibrated`: the profile it made, the report's lines, the same facts for --format json,
and the line that says where the profile went and how to use it. The command writes the
profile and prints `text(out)` or `json(out)`, the same way for all four."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchlab.core.cost.gpu_profile import GpuProfile
from batchlab.core.cost.profile import Profile
from batchlab.core.cost.served.profile import ServedProfile


@dataclass(frozen=True)
class Calibrated:
    profile: Profile | GpuProfile | ServedProfile
    lines: list[str]  # the report, without the closing "written to" line
    summary: dict[str, Any]  # --format json: every field beside "profile" (where it was written)
    # The closing line; {out} is where the profile was written (known only once saved: a
    # profile fitted on runs is named after its model without --out).
    written: str = "\nprofile written to {out}; use it with batchlab simulate --profile {out}"

    def text(self, out: Path) -> str:
        return "\n".join(self.lines + [self.written.format(out=out)])

    def json(self, out: Path) -> str:
        return json.dumps({"profile": str(out), **self.summary}, indent=1)
