"""Simulator cost in CPU instructions a request: a measure the VM's moving speed leaves alone.

    python benchmarks/bench_instructions.py [--baseline DIR] [--requests N1 N2] [--pure]

Wall-clock times on this project's shared 2-vCPU VMs move by 20-50% between runs minutes
apart, more than most changes to the hot path gain. valgrind's cachegrind counts the
instructions a process executes, the same in every run: this runs the synthetic chat
workload of bench_sim.py (chunked, no step table, Llama-3-8B / A100-80GB roofline) at two
sizes in fresh processes under it and prints (instructions at N2 - at N1) / (N2 - N1), so
start-up and imports cancel. --baseline DIR does the same for a checkout of another
revision (its compiled extensions built in place, or pure), and prints the ratio.
Hash seed and BLAS threads are pinned: both change instruction counts from run to run.
Instructions are not time (cache misses and branch mispredictions are not in them), so
bench_sim.py stays the judge of speed; this one says whether a change did less work."""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import sys
from batchlab.core.config import SchedulerConfig
try:  # the step price's homes (2026-12-06); a baseline from before has flat modules
    from batchlab.core.cost.dispatch import kv_capacity_blocks, roofline
    from batchlab.core.model.presets import lookup_hardware, lookup_model
except ImportError:
    from batchlab.core.cost import kv_capacity_blocks, roofline
    from batchlab.core.specs import lookup_hardware, lookup_model
from batchlab.core.workload import WorkloadConfig, build_workload
from batchlab.sim import simulate
model, hw = lookup_model("llama-3-8b"), lookup_hardware("a100-80gb")
w = build_workload(WorkloadConfig(source="chat", num_requests=int(sys.argv[1]), rate=12.0))
simulate(w, SchedulerConfig(policy="chunked"), roofline(model, hw, 1, 0.8, 0.6, 0.002),
         kv_capacity_blocks(model, hw, 1, 16), record_steps=False)
"""


def instructions(source: Path, n: int, pure: bool) -> int:
    """Instructions of one process simulating n requests from `source`."""
    env = dict(os.environ, PYTHONPATH=str(source), PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("BATCHLAB_PURE", None)
    if pure:
        env["BATCHLAB_PURE"] = "1"
    p = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                        sys.executable, "-c", CHILD, str(n)], env=env, cwd="/", capture_output=True, text=True)
    found = re.search(r"I\s+refs:\s+([\d,]+)", p.stderr)
    if p.returncode or not found:
        raise SystemExit(f"bench_instructions: {source} ({n} requests) failed: {p.stderr.strip()[-400:]}")
    return int(found.group(1).replace(",", ""))


def per_request(source: Path, n1: int, n2: int, pure: bool) -> float:
    return (instructions(source, n2, pure) - instructions(source, n1, pure)) / (n2 - n1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", metavar="DIR", help="a checkout of another revision to compare")
    ap.add_argument("--requests", nargs=2, type=int, default=(2000, 6000), metavar=("N1", "N2"))
    ap.add_argument("--pure", action="store_true", help="run the pure-Python build (BATCHLAB_PURE=1)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("bench_instructions: valgrind not found (apt install valgrind)")
    n1, n2 = args.requests
    if not 0 < n1 < n2:
        raise SystemExit(f"bench_instructions: --requests wants 0 < N1 < N2, got {n1} {n2}")
    build = "pure" if args.pure else "as installed"
    here = per_request(ROOT, n1, n2, args.pure)
    print(f"{n2 - n1:,} synthetic chat requests ({n1:,} to {n2:,}), chunked, no step table, {build}")
    print(f"  this checkout: {here:,.0f} instructions a request")
    if args.baseline:
        base = per_request(Path(args.baseline).resolve(), n1, n2, args.pure)
        print(f"  baseline {args.baseline}: {base:,.0f} instructions a request")
        print(f"  baseline / this checkout: {base / here:.3f}x")


if __name__ == "__main__":
    main()
