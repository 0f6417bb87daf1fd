"""The default price against the roofline, in one run: CPU seconds of `batchlab simulate`
on N synthetic chat requests (chunked, no step table) priced by default (the served GPU
profile, for a dense model on an A100/H100/H200) and by --cost roofline (issue 48 item 1).

    python benchmarks/bench_default_price.py [--requests N] [--pairs P] [--baseline DIR]

Each run is a fresh process of the CLI (start-up included, as a user runs it), alternating
default, roofline, ... and the other way round every other pair, so that a slow spell of
the shared machine hits both alike; it prints each price's median CPU seconds (user +
system, from the kernel's accounting of the child), the simulation's wall seconds, and
default / roofline. --baseline DIR also times the default price of another checkout (a
worktree of an earlier revision, built the same way) for a before and after. The build that
runs is the one PYTHONPATH (or the checkout of this file) holds: compiled where it was built
in place, pure Python under BATCHLAB_PURE=1."""
from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRICES = {"default": [], "roofline": ["--cost", "roofline"]}


def cli_run(tree: Path, n: int, extra: list[str]) -> tuple[float, float]:
    """(CPU seconds of the whole process, the simulation's wall seconds it printed)."""
    cmd = [sys.executable, "-m", "batchlab", "simulate", "--workload", "chat", "--num-requests", str(n),
           "--policy", "chunked", "--no-step-table", "--format", "json", *extra]
    env = dict(os.environ, PYTHONPATH=str(tree))
    before = children_cpu()
    p = subprocess.run(cmd, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    cpu = children_cpu() - before  # the runs are one at a time: this one's
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed: {p.stderr.strip()[-600:]}")
    wall = re.search(r"simulated in ([0-9.]+) s", p.stderr)
    return cpu, float(wall.group(1)) if wall else float("nan")


def children_cpu() -> float:
    """User and system CPU seconds of the children waited for so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown CPU")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{model}, {os.cpu_count()} CPUs, load average {load}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1_000_000,
                    help="synthetic chat requests (default 1,000,000)")
    ap.add_argument("--pairs", type=int, default=2, help="runs of each price, alternating (default 2)")
    ap.add_argument("--baseline", type=Path, help="also time this checkout's default price")
    args = ap.parse_args()
    runs = {name: (ROOT, extra) for name, extra in PRICES.items()}
    if args.baseline:
        runs["baseline default"] = (args.baseline.resolve(), [])
    pure = os.environ.get("BATCHLAB_PURE", "") not in ("", "0")
    print(f"machine: {machine()}; python {sys.version.split()[0]}; {'pure' if pure else 'compiled'} build")
    print(f"{args.requests:,} synthetic chat requests, chunked, no step table; "
          f"{args.pairs} runs each, alternating")
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for i in range(args.pairs):
        for name in (list(runs) if i % 2 == 0 else list(runs)[::-1]):
            tree, extra = runs[name]
            samples[name].append(cli_run(tree, args.requests, extra))
    cpu = {name: statistics.median(c for c, _ in s) for name, s in samples.items()}
    print(f"  {'price':<18}{'CPU s (process)':>16}{'sim wall s':>12}  all CPU s")
    for name, s in samples.items():
        print(f"  {name:<18}{cpu[name]:>16.2f}{statistics.median(w for _, w in s):>12.2f}  "
              + " ".join(f"{c:.2f}" for c, _ in s))
    print(f"default / roofline CPU: {cpu['default'] / cpu['roofline']:.2f}x (issue 48: within 1.2x, "
          f"and under 12 CPU s at 1,000,000 requests)")
    if args.baseline:
        print(f"baseline default / default CPU: {cpu['baseline default'] / cpu['default']:.2f}x")
    print(f"machine after the runs: {machine()}")


if __name__ == "__main__":
    main()
