"""Many replicas: does an arrival cost only the replica it is routed to? (issue 48 item 2)

    python benchmarks/bench_replicas.py [--replicas 64] [--requests N] [--router NAME]
                                        [--scaling R1,R2 [--per-replica 20] [--rate-per-replica 1]]
                                        [--baseline DIR] [--pairs 1] [--instructions N1 N2 [--cache]]
                                        [--scaling R1,R2 --count]

The Azure conversation trace (../shared/traces) on one replica, then over R replicas
at R times its rate (--router, default round_robin; continuous, step table kept,
Llama-3-8B / A100-80GB roofline): CPU seconds per request and decisions (engine
iterations: a step or a fast-forward run) per request for each, and the ratios R / 1.
With the fast-forward exact, an arrival that cut only its own replica's run would leave
both ratios near 1. --scaling R1,R2: the synthetic chat workload, --per-replica requests
a replica at --rate-per-replica requests/s a replica, no step table (a lone request's
every step would be a row), over R1 then R2 replicas: CPU per request at each (linear:
the ratio near 1).

Each simulation runs in a process of its own (a `simulate()` call timed with
time.process_time(), start-up left out), with the batchlab of this checkout, or of
--baseline DIR as well (A/B in one run, alternating, --pairs times each: medians).
--instructions N1 N2: instead, instructions a request under valgrind's cachegrind of the
trace's first N1 and N2 rows ((at N2 - at N1) / (N2 - N1): start-up and building the
replicas cancel), 1 and R replicas: the same in every run, where the shared VM's CPU
time moves with its load (printed). With --cache, cachegrind's cache model as well (its
I1, D1 and last-level data misses a request, reads and writes together; slower).
--scaling R1,R2 --count [--cache]: instructions (and misses) a request of the `simulate()`
call at R1 and R2 replicas under cachegrind (the run's process less one that builds the
workload and stops)."""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = next((p for p in [Path(os.environ.get("BATCHLAB_TRACES", "/nonexistent"))]
               + [ROOT.parents[k] / "shared" / "traces" for k in (0, 1)]
               if p.is_dir()), Path("/work/shared/traces"))


def child(job: dict) -> None:
    """One simulation in this process (the batchlab on sys.path): prints its figures."""
    from batchlab.core.config import SchedulerConfig
    from batchlab.core.cost.dispatch import kv_capacity_blocks, roofline
    from batchlab.core.model.presets import lookup_hardware, lookup_model
    from batchlab.core.workload import WorkloadConfig, build_workload
    from batchlab.sim import simulate
    from batchlab.sim.counting import counting_decisions
    model, hw = lookup_model("llama-3-8b"), lookup_hardware("a100-80gb")
    cost = roofline(model, hw, 1, 0.8, 0.6, 0.002)
    blocks = kv_capacity_blocks(model, hw, 1, 16)
    r = job["replicas"]
    if job["kind"] == "conv":
        config = WorkloadConfig(source=str(TRACES / "azure2023_conv.csv"), num_requests=job["requests"],
                                rate_scale=r)
    else:
        config = WorkloadConfig(source="chat", num_requests=job["requests"], rate=job["rate"])
    w = build_workload(config)
    if job.get("dry"):  # --count: what the process costs without the simulation
        print(json.dumps({"requests": len(w), "cpu_us": 0.0, "decisions": 0.0}))
        return
    with counting_decisions() as n:
        t0 = time.process_time()
        simulate(w, SchedulerConfig(policy="continuous"), cost, blocks, replicas=r, router=job["router"],
                 record_steps=job["kind"] == "conv")
        cpu = time.process_time() - t0
    print(json.dumps({"requests": len(w), "cpu_us": cpu / len(w) * 1e6, "decisions": n[0] / len(w)}))


MISSES = {"I1": r"I1\s+misses:\s+([\d,]+)", "D1": r"D1\s+misses:\s+([\d,]+)",
          "LL": r"LLd\s+misses:\s+([\d,]+)"}


def spawn(tree: Path, job: dict, valgrind: bool = False, cache: bool = False) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(job)]
    if valgrind:
        cmd = ["valgrind", "--tool=cachegrind", f"--cache-sim={'yes' if cache else 'no'}",
               "--cachegrind-out-file=/dev/null", *cmd]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{tree}: {job} failed: {p.stderr.strip()[-600:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    if valgrind:
        out["instructions"] = int(re.search(r"I\s+refs:\s+([\d,]+)", p.stderr).group(1).replace(",", ""))
        for level, pattern in MISSES.items() if cache else ():
            out[level] = int(re.search(pattern, p.stderr).group(1).replace(",", ""))
    return out


def measure(trees: dict[str, Path], jobs: dict[str, dict], pairs: int) -> dict[tuple[str, str], dict]:
    """Every job with every tree, `pairs` times, the trees alternating: medians."""
    got: dict[tuple[str, str], list[dict]] = {}
    for i in range(pairs):
        for job_name, job in jobs.items():
            order = list(trees) if i % 2 == 0 else list(trees)[::-1]
            for name in order:
                got.setdefault((name, job_name), []).append(spawn(trees[name], job))
    return {key: {f: statistics.median(s[f] for s in samples) for f in samples[0]}
            for key, samples in got.items()}


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--requests", type=int, default=None, help="first N rows of the trace")
    ap.add_argument("--router", default="round_robin")
    ap.add_argument("--scaling", default="", metavar="R1,R2", help="synthetic: replicas R1 then R2")
    ap.add_argument("--per-replica", type=int, default=20, help="--scaling: requests a replica")
    ap.add_argument("--rate-per-replica", type=float, default=1.0, help="--scaling: requests/s a replica")
    ap.add_argument("--baseline", type=Path, help="also run this checkout's batchlab (A/B)")
    ap.add_argument("--pairs", type=int, default=1, help="runs of each, alternating (medians)")
    ap.add_argument("--instructions", nargs=2, type=int, metavar=("N1", "N2"),
                    help="instructions a request under cachegrind, trace rows N1 to N2")
    ap.add_argument("--cache", action="store_true", help="--instructions, --count: I1, D1 and LL misses too")
    ap.add_argument("--count", action="store_true", help="--scaling: instructions a request (cachegrind)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(json.loads(args.child))
    trees = {"this": ROOT}
    if args.baseline:
        trees["baseline"] = args.baseline.resolve()
    pure = os.environ.get("BATCHLAB_PURE", "") not in ("", "0")
    print(f"build {'pure' if pure else 'compiled'}, router {args.router}, load average {load()}")
    r, many = args.replicas, f"x{args.replicas}"
    if args.scaling and args.count:
        return count_scaling(trees, args)
    if args.instructions:
        n1, n2 = args.instructions
        for name, tree in trees.items():
            per = {}
            for reps in (1, r):
                at = [spawn(tree, dict(kind="conv", replicas=reps, requests=n, router=args.router), True,
                            args.cache) for n in (n1, n2)]
                per[reps] = (at[1]["instructions"] - at[0]["instructions"]) / (n2 - n1)
                misses = "".join(f", {(at[1][k] - at[0][k]) / (n2 - n1):7,.1f} {k} misses/request"
                                 for k in MISSES if k in at[0])
                print(f"{name}: conv x{reps:<4} over {reps:>6} replicas, rows {n1}-{n2}: "
                      f"{per[reps]:10,.0f} instructions/request{misses}, "
                      f"{at[1]['decisions']:.2f} decisions/request")
            print(f"{name}: ratio {r}/1 instructions per request {per[r] / per[1]:.2f}x")
        print(f"load average {load()} at the end")
        return
    jobs = {f"x{reps}": dict(kind="conv", replicas=reps, requests=args.requests, router=args.router)
            for reps in (1, r)}
    if args.scaling:
        a, b = (int(x) for x in args.scaling.split(","))
        for reps in (a, b):
            jobs[f"chat{reps}"] = dict(kind="chat", replicas=reps, requests=args.per_replica * reps,
                                       rate=args.rate_per_replica * reps, router=args.router)
    got = measure(trees, jobs, args.pairs)
    for name in trees:
        for job_name, job in jobs.items():
            g = got[(name, job_name)]
            what = (f"conv x{job['replicas']:<4}" if job["kind"] == "conv" else "chat     ")
            print(f"{name}: {what} over {job['replicas']:>6} replicas: {g['requests']:>8.0f} requests, "
                  f"{g['cpu_us']:8.1f} CPU-us/request, {g['decisions']:6.2f} decisions/request")
        one, far = got[(name, "x1")], got[(name, many)]
        print(f"{name}: ratio {r}/1: CPU per request {far['cpu_us'] / one['cpu_us']:.2f}x (target <= 1.5x), "
              f"decisions per request {far['decisions'] / one['decisions']:.2f}x")
        if args.scaling:
            print(f"{name}: scaling {a} -> {b} replicas: CPU per request "
                  f"{got[(name, f'chat{b}')]['cpu_us'] / got[(name, f'chat{a}')]['cpu_us']:.2f}x (linear: ~1)")
    print(f"load average {load()} at the end")


def count_scaling(trees: dict[str, Path], args: argparse.Namespace) -> None:
    """--scaling R1,R2 --count: the simulate() call's instructions a request at each."""
    a, b = (int(x) for x in args.scaling.split(","))
    for name, tree in trees.items():
        per = {}
        for reps in (a, b):
            job = dict(kind="chat", replicas=reps, requests=args.per_replica * reps,
                       rate=args.rate_per_replica * reps, router=args.router)
            run, dry = (spawn(tree, dict(job, dry=d), True, args.cache) for d in (False, True))
            per[reps] = (run["instructions"] - dry["instructions"]) / run["requests"]
            misses = "".join(f", {(run[k] - dry[k]) / run['requests']:7,.1f} {k} misses/request"
                             for k in MISSES if k in run)
            print(f"{name}: chat over {reps:>6} replicas: {run['requests']:>8.0f} requests, "
                  f"{per[reps]:10,.0f} instructions/request{misses}, {run['decisions']:.2f} decisions/request")
        print(f"{name}: scaling {a} -> {b} replicas: instructions per request {per[b] / per[a]:.2f}x")
    print(f"load average {load()} at the end")


if __name__ == "__main__":
    main()
