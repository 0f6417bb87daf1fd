"""The default price against the roofline, in one run: CPU seconds of `batchlab simulate`
on N synthetic chat requests (chunked, no step table) priced by default (the served GPU
profile, for a dense model on an A100/H100/H200) and by --cost roofline (issue 48 item 1).

    python benchmarks/bench_default_price.py [--requests N] [--pairs P] [--baseline DIR]
    python benchmarks/bench_default_price.py --instructions N1 N2

Each run is a fresh process of the CLI (start-up included, as a user runs it), alternating
default, roofline, ... and the other way round every other pair, so that a slow spell of
the shared machine hits both alike; it prints each price's median CPU seconds (user +
system, from the kernel's accounting of the child), the simulation's wall seconds, and
default / roofline. --baseline DIR also times the default price of another checkout (a
worktree of an earlier revision, built the same way) for a before and after. The build that
runs is the one PYTHONPATH (or the checkout of this file) holds: compiled where it was built
in place, pure Python under BATCHLAB_PURE=1.

--instructions N1 N2: instead, the instructions a request costs under valgrind's cachegrind
for each price ((at N2 - at N1) / (N2 - N1), start-up cancelled, as bench_instructions.py
counts them): the same in every run, where the shared VM's speed moves."""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
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
    for line in p.stderr.splitlines():  # e.g. a stale build running as pure Python
        if line.startswith("batchlab:") and line not in WARNED:
            WARNED.add(line)
            print(f"  WARNING ({tree.name}): {line}")
    wall = re.search(r"simulated in ([0-9.]+) s", p.stderr)
    return cpu, float(wall.group(1)) if wall else float("nan")


WARNED: set[str] = set()


def cli_instructions(tree: Path, n: int, extra: list[str]) -> int:
    """Instructions of one CLI process simulating n requests (hash seed, BLAS threads pinned)."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                        sys.executable, "-m", "batchlab", "simulate", "--workload", "chat", "--num-requests",
                        str(n), "--policy", "chunked", "--no-step-table", "--format", "json", *extra],
                       env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    found = re.search(r"I\s+refs:\s+([\d,]+)", p.stderr)
    if p.returncode or not found:
        raise SystemExit(f"{tree} ({n} requests) failed: {p.stderr.strip()[-400:]}")
    return int(found.group(1).replace(",", ""))


def instructions_main(runs: dict[str, tuple[Path, list[str]]], n1: int, n2: int) -> None:
    print(f"{n2 - n1:,} synthetic chat requests ({n1:,} to {n2:,}), chunked, no step table, under cachegrind")
    per = {name: (cli_instructions(tree, n2, extra) - cli_instructions(tree, n1, extra)) / (n2 - n1)
           for name, (tree, extra) in runs.items()}
    for name, v in per.items():
        print(f"  {name:<18}{v:>12,.0f} instructions a request")
    print(f"default / roofline instructions: {per['default'] / per['roofline']:.2f}x")
    if "baseline default" in per:
        print(f"baseline default / default instructions: {per['baseline default'] / per['default']:.2f}x")


def children_cpu() -> float:
    """User and system CPU seconds of the children waited for so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def byte_compile(tree: Path) -> None:
    """Write a tree's bytecode before it is measured: a stale or missing .pyc would be
    compiled again in every process (PYTHONDONTWRITEBYTECODE) and counted as the price's."""
    dirs = [str(tree / d) for d in ("batchlab", "core", "sim", "experiments", "calibration", "backend")
            if (tree / d).is_dir()]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *dirs], check=True, capture_output=True)


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
    ap.add_argument("--instructions", nargs=2, type=int, metavar=("N1", "N2"),
                    help="count instructions a request under valgrind instead (e.g. 2000 6000)")
    args = ap.parse_args()
    runs = {name: (ROOT, extra) for name, extra in PRICES.items()}
    if args.baseline:
        runs["baseline default"] = (args.baseline.resolve(), [])
    pure = os.environ.get("BATCHLAB_PURE", "") not in ("", "0")
    for tree in {tree for tree, _ in runs.values()}:
        byte_compile(tree)
    print(f"machine: {machine()}; python {sys.version.split()[0]}; {'pure' if pure else 'compiled'} build")
    if args.instructions:
        n1, n2 = args.instructions
        if not 0 < n1 < n2 or shutil.which("valgrind") is None:
            raise SystemExit("--instructions wants 0 < N1 < N2 and valgrind (apt install valgrind)")
        return instructions_main(runs, n1, n2)
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
