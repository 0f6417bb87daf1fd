"""Start-up: how long `batchlab simulate` takes from process start to its first simulated
step, against a floor measured in the same run.

    python benchmarks/bench_startup.py [--runs N] [--json]

Each figure is the median of N fresh interpreters (min in brackets):
- python -c pass: the interpreter alone;
- import numpy, pydantic, simpy: the floor, the libraries a simulation cannot do without;
- first simulated step: from just before the process is started to the moment
  batchlab.sim.simulate is entered by `batchlab simulate --num-requests 1 --policy
  continuous` (time.monotonic: one clock for both processes);
- whole command: the same command's wall time, to its exit.
Then the import time of every module the command loads (-X importtime, self time summed
by package), to show where what is left goes. The machine is shared and noisy: compare
the ratio to the floor measured in the same run, not absolute seconds."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict

COMMAND = ["simulate", "--num-requests", "1", "--policy", "continuous"]

# In the child: note when the simulator is entered, then run the command as the console
# script does. batchlab.sim is imported first only to wrap it; the command imports it anyway.
CHILD = """
import sys, time
import batchlab.sim as sim
_real = sim.simulate
def _first(*a, **k):
    if not hasattr(_first, "t"):
        _first.t = time.monotonic()
        sys.stderr.write(f"FIRST_STEP {_first.t!r}\\n")
    return _real(*a, **k)
sim.simulate = _first
from batchlab.experiments.cli import main
sys.exit(main(%r))
"""


def _run(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    """(wall seconds from just before the start to the exit, stderr)."""
    t0 = time.monotonic()
    p = subprocess.run(args, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    return wall, p.stderr


def _first_step(env: dict[str, str]) -> float:
    t0 = time.monotonic()
    _, err = _run([sys.executable, "-c", CHILD % (COMMAND,)], env)
    stamp = next(line for line in err.splitlines() if line.startswith("FIRST_STEP "))
    return float(stamp.split()[1]) - t0


def _import_times(env: dict[str, str]) -> dict[str, float]:
    """Self import time (s) of every module the command loads, summed by package."""
    code = f"from batchlab.experiments.cli import main; main({COMMAND!r})"
    _, err = _run([sys.executable, "-X", "importtime", "-c", code], env)
    by = defaultdict(float)
    for line in err.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = (x.strip() for x in line.removeprefix("import time:").split("|"))
        parts = name.split(".")
        key = ".".join(parts[:2]) if parts[0] == "batchlab" else parts[0]
        by[key] += int(self_us) / 1e6
    return dict(sorted(by.items(), key=lambda kv: -kv[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="fresh interpreters per figure (default 7)")
    ap.add_argument("--json", action="store_true", help="the figures as JSON")
    a = ap.parse_args()
    env = dict(os.environ)
    _run([sys.executable, "-m", "batchlab", *COMMAND], env)  # warm the file cache and .pyc
    rows = {
        "python -c pass": lambda: _run([sys.executable, "-c", "pass"], env)[0],
        "import numpy, pydantic, simpy": lambda: _run([sys.executable, "-c", "import numpy, pydantic, simpy"], env)[0],
        "first simulated step": lambda: _first_step(env),
        "whole command": lambda: _run([sys.executable, "-m", "batchlab", *COMMAND], env)[0],
    }
    samples = {name: [] for name in rows}
    for _ in range(a.runs):  # interleaved, so that a slow spell of the machine hits every row
        for name, measure in rows.items():
            samples[name].append(measure())
    med = {n: statistics.median(v) for n, v in samples.items()}
    floor, first = med["import numpy, pydantic, simpy"], med["first simulated step"]
    imports = _import_times(env)
    if a.json:
        print(json.dumps({"command": "batchlab " + " ".join(COMMAND), "runs": a.runs,
                          "median_s": med, "min_s": {n: min(v) for n, v in samples.items()},
                          "first_step_over_floor": first / floor, "import_self_s": imports}, indent=1))
        return
    print(f"batchlab {' '.join(COMMAND)}: median of {a.runs} fresh processes (min)")
    for name, v in samples.items():
        note = ""
        if name == "first simulated step":
            note = f"   {first / floor:.2f} x the floor, floor + {first - floor:.3f} s"
        print(f"  {name:<32}{med[name]:7.3f} s ({min(v):.3f}){note}")
    total = sum(imports.values())
    print(f"import time of what the command loads (self, one run): {total:.3f} s")
    for name, s in list(imports.items())[:12]:
        print(f"  {name:<32}{s * 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
