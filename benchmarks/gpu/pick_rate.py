"""The open-loop rate for a validation on a machine not measured before: the highest of a
doubling ladder at which the simulation (with the profile just calibrated) stays stable
and its median TPOT is at most SLOWDOWN x its lightest-load value, i.e. loaded enough that
batching shapes the latencies, below saturation, where validation judges them.

    python pick_rate.py PROFILE -- WORKLOAD ARGS...   (prints the rate)"""
from __future__ import annotations

import contextlib
import io
import json
import sys

from batchlab.experiments.cli import main

SLOWDOWN = 1.5
LADDER = [0.25 * 2 ** k for k in range(12)]  # 0.25 .. 512 requests/s


def simulated(profile: str, workload: list[str], rate: float) -> dict:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["simulate", *workload, "--rate", f"{rate:g}", "--profile", profile,
                     "--policy", "continuous", "--format", "json"])
    if code != 0:
        said = (err.getvalue().strip().splitlines() or [f"exit {code}"])[-1]
        raise SystemExit(f"pick_rate: batchlab simulate failed at rate {rate:g}: {said}")
    return json.loads(out.getvalue())["continuous"]


def pick(profile: str, workload: list[str]) -> float:
    light = simulated(profile, workload, LADDER[0])["median_tpot_ms"]
    best = LADDER[0]
    for rate in LADDER[1:]:
        s = simulated(profile, workload, rate)
        if s["stability"] != "stable" or s["median_tpot_ms"] > SLOWDOWN * light:
            break
        best = rate
    return best


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[2] != "--":
        raise SystemExit(__doc__)
    print(f"{pick(sys.argv[1], sys.argv[3:]):g}")
