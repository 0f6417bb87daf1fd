"""Simulator speed: the compiled hot path against the pure-Python build, in one run.

    python benchmarks/bench_sim.py [--quick] [--synthetic N] [--pairs P] [--baseline DIR]
    python benchmarks/bench_sim.py --modes [--quick] [--profile]

Default: each build in its own processes, alternating (compiled, pure, ...; then the other
way round), P pairs (default 3): the whole Azure conversation trace (../shared/traces,
continuous and chunked, step table kept, as `batchlab simulate` does) and a synthetic chat
workload of N requests (default 1,000,000; chunked, no step table), on one replica of
Llama-3-8B / A100-80GB (roofline). It prints the machine (CPU model, cores, load), each
build's median simulation wall and CPU seconds, the whole process's wall seconds, the
ratios pure / compiled, and memory per request (RSS growth per request that left, and the
peak). --baseline DIR adds a third build: a checkout of another revision (today's main:
`git archive main | tar -x -C DIR`), run from its own source. The compiled build is the
install's (pip install -e . compiles it); BATCHLAB_PURE=1 runs the same install's .py.

--modes: the older table, in this process: fast-forward against step-by-step with and
without a step table on both traces, long replies and the synthetic workload; --profile
adds where the time goes by module (meaningful on the pure build: BATCHLAB_PURE=1, since
compiled functions are invisible to cProfile).

steps/decision bounds what fast-forward can gain: a decision is one engine iteration (a
step, or a whole run), and every arrival, admission and finish still takes one."""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batchlab.core.config import SchedulerConfig  # noqa: E402
from batchlab.core.cost.dispatch import kv_capacity_blocks, roofline
from batchlab.core.model.presets import lookup_hardware, lookup_model
from batchlab.core.workload import LengthSpec, WorkloadConfig, build_workload  # noqa: E402
from batchlab.sim import simulate  # noqa: E402
from batchlab.sim.counting import counting_decisions, counting_events  # noqa: E402

# ../shared/traces beside the checkout (a worktree of /work/wt/NAME: two levels up), or
# BATCHLAB_TRACES.
TRACES = next((p for p in [Path(os.environ.get("BATCHLAB_TRACES", "/nonexistent"))]
               + [Path(__file__).resolve().parents[k] / "shared" / "traces" for k in (2, 3)]
               if p.is_dir()), Path("../shared/traces"))


REPEAT = 3  # trace rows: the best of this many runs (the machine is shared and noisy)


def timed(workload, policy, fast_forward, cost, blocks, record_steps=True, repeat=REPEAT):
    """(best wall seconds of `repeat` runs, SimPy events, steps, decisions). The runs are
    identical: the counts come from one more run, untimed, so that counting costs the
    timed ones nothing. A decision is one engine iteration: a step, or a run."""
    def run():
        return simulate(workload, SchedulerConfig(policy=policy), cost, blocks,
                        fast_forward=fast_forward, record_steps=record_steps)
    with counting_events() as events, counting_decisions() as decisions:
        steps = run().summary()["num_steps"]
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best, events[0], steps, decisions[0]


# Where simulator time goes, by the file a function lives in.
COMPONENTS = (("simpy", "SimPy events"), ("core/schedulers", "scheduler"), ("core/kv", "scheduler"),
              ("core/decode_group", "scheduler"), ("core/fast_forward", "cost model"),
              ("core/batch", "step features"), ("core/metrics", "metrics recording"),
              ("core/cost", "cost model"), ("sim/", "engine and arrivals"), ("numpy", "numpy (python side)"))


def profile(workload, policy, cost, blocks) -> None:
    prof = cProfile.Profile()
    prof.runcall(simulate, workload, SchedulerConfig(policy=policy), cost, blocks)
    shares: dict[str, float] = {}
    for (path, _, _), row in pstats.Stats(prof).stats.items():
        name = next((label for key, label in COMPONENTS if key in path),
                    "builtins and numpy C calls" if path == "~" else "other (workload, summary)")
        shares[name] = shares.get(name, 0.0) + row[2]  # own time, callees excluded
    total = sum(shares.values())
    print(f"where the time goes ({policy}, fast-forward, own time under cProfile):")
    for name, t in sorted(shares.items(), key=lambda x: -x[1]):
        print(f"  {name:<38}{t / total:>6.1%}")


# One build's run of one workload, in a fresh process whose batchlab comes from PYTHONPATH:
# prints one JSON line (simulation wall and CPU seconds per policy, memory).
CHILD = r"""
import json, os, sys, time
from pathlib import Path
from batchlab.core.config import SchedulerConfig
try:  # the step price's homes (2026-12-06); a baseline from before has flat modules
    from batchlab.core.cost.dispatch import kv_capacity_blocks, roofline
    from batchlab.core.model.presets import lookup_hardware, lookup_model
except ImportError:
    from batchlab.core.cost import kv_capacity_blocks, roofline
    from batchlab.core.specs import lookup_hardware, lookup_model
from batchlab.core.workload import WorkloadConfig, build_workload
from batchlab.sim import simulate
compiled = 0  # a revision from before the compiled build has no batchlab/_compiled.py (nor
if Path(os.environ["PYTHONPATH"], "batchlab", "_compiled.py").is_file():  # the installed one's)
    from batchlab._compiled import compiled_modules
    compiled = len(compiled_modules())

def rss(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0

kind, arg, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
model, hw = lookup_model("llama-3-8b"), lookup_hardware("a100-80gb")
cost = roofline(model, hw, 1, 0.8, 0.6, 0.002)
blocks = kv_capacity_blocks(model, hw, 1, 16)
out = {"compiled": compiled, "runs": {}}
if kind == "trace":
    w = build_workload(WorkloadConfig(source=arg, num_requests=limit or None))
    policies, table = ("continuous", "chunked"), True
else:
    w = build_workload(WorkloadConfig(source="chat", num_requests=int(arg), rate=12.0))
    policies, table = ("chunked",), False
n = len(w)
left, at = [0], {}
def progress(k):
    left[0] += k
    if left[0] % (n // 10 or 1) == 0:
        at[left[0]] = rss("VmRSS")
for policy in policies:
    left[0], at = 0, {}
    t0, c0 = time.perf_counter(), time.process_time()
    r = simulate(w, SchedulerConfig(policy=policy), cost, blocks, record_steps=table, progress=progress)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    first, last = min(at), max(at)
    out["runs"][policy] = {"wall_s": wall, "cpu_s": cpu, "requests": n,
                           "steps": int(r.summary()["num_steps"]),
                           "bytes_per_request": (at[last] - at[first]) / max(1, last - first)}
out["peak_rss"] = rss("VmHWM")
print(json.dumps(out))
"""


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{cpu_model()}, {os.cpu_count()} CPUs, load average {load}"


def child(build: str, source: str, kind: str, arg: str, limit: int = 0) -> dict:
    """One fresh process of `build` (compiled | pure | baseline): its JSON, plus the whole
    process's wall seconds (start-up and workload loading included)."""
    env = dict(os.environ, PYTHONPATH=source, PYTHONDONTWRITEBYTECODE="1")
    env.pop("BATCHLAB_PURE", None)
    if build == "pure":
        env["BATCHLAB_PURE"] = "1"
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", CHILD, kind, arg, str(limit)], env=env, cwd="/",
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"{build} ({kind} {arg}) failed: {p.stderr.strip()[-800:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["process_s"] = wall
    return out


def compare(name: str, kind: str, arg: str, builds: dict[str, str], pairs: int,
            limit: int = 0) -> dict:
    """Alternating runs of every build (the order reversed every other round, so that a
    slow spell of the shared machine hits each build alike); medians per build."""
    samples: dict[str, list[dict]] = {b: [] for b in builds}
    for i in range(pairs):
        order = list(builds) if i % 2 == 0 else list(builds)[::-1]
        for b in order:
            samples[b].append(child(b, builds[b], kind, arg, limit))
    med = {}
    for b, runs in samples.items():
        policies = runs[0]["runs"]
        med[b] = {"process_s": statistics.median(r["process_s"] for r in runs),
                  "peak_mib": max(r["peak_rss"] for r in runs) / 2**20,
                  "compiled": runs[0]["compiled"],
                  "runs": {p: {k: statistics.median(r["runs"][p][k] for r in runs)
                               for k in ("wall_s", "cpu_s", "bytes_per_request", "steps", "requests")}
                           for p in policies}}
    print(f"{name}: median of {pairs} per build (alternating)")
    if not med["compiled"]["compiled"]:
        print("  WARNING: the 'compiled' build ran no compiled module (not built in place, or "
              "stale: pip install -e . first)")
    print(f"  {'build':<10}{'modules':>8}{'policy':>12}{'sim wall s':>12}{'sim CPU s':>11}{'req/s':>10}"
          f"{'process s':>11}{'bytes/req':>11}{'peak MiB':>10}")
    for b, m in med.items():
        for p, r in m["runs"].items():
            print(f"  {b:<10}{m['compiled']:>8}{p:>12}{r['wall_s']:>12.2f}{r['cpu_s']:>11.2f}"
                  f"{r['requests'] / r['wall_s']:>10.0f}{m['process_s']:>11.2f}"
                  f"{r['bytes_per_request']:>11.0f}{m['peak_mib']:>10.0f}")
    for other in [b for b in med if b != "compiled"]:
        for p in med["compiled"]["runs"]:
            c, o = med["compiled"]["runs"][p], med[other]["runs"][p]
            print(f"  {other} / compiled, {p}: simulation wall {o['wall_s'] / c['wall_s']:.2f}x, "
                  f"CPU {o['cpu_s'] / c['cpu_s']:.2f}x")
        print(f"  {other} / compiled, whole process: "
              f"{med[other]['process_s'] / med['compiled']['process_s']:.2f}x")
    return med


def byte_compile(source: str) -> None:
    """Write a build's bytecode before it is timed: a checkout made by `git archive` has
    none, and under PYTHONDONTWRITEBYTECODE each of its processes would compile every
    source again, which no user's second run does."""
    dirs = [str(Path(source, d)) for d in ("batchlab", "core", "sim", "experiments", "calibration", "backend")
            if Path(source, d).is_dir()]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *dirs], check=True, capture_output=True)


def builds_main(args) -> None:
    root = str(Path(__file__).resolve().parents[1])
    builds = {"compiled": root, "pure": root}
    if args.baseline:
        builds["baseline"] = str(Path(args.baseline).resolve())
    for source in set(builds.values()):
        byte_compile(source)
    print(f"machine: {machine()}; python {sys.version.split()[0]}")
    conv = TRACES / "azure2023_conv.csv"
    results = {}
    if conv.exists():
        part = f"first {args.trace_requests:,} requests" if args.trace_requests else "whole"
        results["conv"] = compare(f"Azure conv trace ({conv.name}, {part}), step table kept",
                                  "trace", str(conv), builds, args.pairs, args.trace_requests)
    else:
        print(f"{conv}: not found, skipped")
    n = args.synthetic
    results["synthetic"] = compare(f"{n:,} synthetic chat requests, no step table", "synthetic",
                                   str(n), builds, max(1, args.pairs if n <= 100_000 else 1))
    s = results["synthetic"]["compiled"]["runs"]["chunked"]
    ratio = results["synthetic"]["pure"]["runs"]["chunked"]["wall_s"] / s["wall_s"]
    print(f"targets (issue 33): {n:,} requests in {s['wall_s']:.1f} s wall (goal < 20 s for "
          f"1,000,000 on a quiet 2-vCPU machine), {ratio:.2f}x the pure build (goal >= 3x)")
    print(f"machine after the runs: {machine()}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true",
                    help="100,000 synthetic requests unless --synthetic; --modes: first 3000 of each trace")
    ap.add_argument("--synthetic", type=int, help="requests in the synthetic run (default 1,000,000)")
    ap.add_argument("--pairs", type=int, default=3, help="alternating runs per build (default 3)")
    ap.add_argument("--trace-requests", type=int, default=0, metavar="N",
                    help="only the trace's first N requests (default: all; for quick looks)")
    ap.add_argument("--baseline", metavar="DIR", help="also time a checkout of another revision")
    ap.add_argument("--modes", action="store_true", help="fast-forward against step-by-step, in this process")
    ap.add_argument("--profile", action="store_true", help="--modes: time by component on the conv trace")
    ap.add_argument("--synthetic-only", type=int, metavar="N", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.synthetic is None:
        args.synthetic = 100_000 if args.quick else 1_000_000
    if not args.modes and not args.synthetic_only:
        return builds_main(args)
    modes_main(args)


def modes_main(args) -> None:
    model, hw = lookup_model("llama-3-8b"), lookup_hardware("a100-80gb")
    cost = roofline(model, hw, 1, 0.8, 0.6, 0.002)
    blocks = kv_capacity_blocks(model, hw, 1, 16)
    if args.synthetic_only:
        return synthetic(args.synthetic_only, cost, blocks)
    print(f"python {sys.version.split()[0]}, pid {os.getpid()}, llama-3-8b on a100-80gb, {blocks} KV blocks")
    print(f"{'workload':<22}{'policy':<12}{'mode':<14}{'wall s':>8}{'req/s':>10}{'events/s':>10}"
          f"{'steps':>9}{'steps/event':>12}{'steps/decision':>15}{'speed-up':>9}")
    conv: dict[str, tuple] = {}  # policy -> (wall s, req/s, gain, steps per decision)
    for name in ("azure2023_conv.csv", "azure2023_code.csv"):
        path = TRACES / name
        if not path.exists():
            print(f"{name}: not found at {path}, skipped")
            continue
        w = build_workload(WorkloadConfig(source=str(path), num_requests=3000 if args.quick else None))
        for policy in ("continuous", "chunked"):
            base = stepped = None
            # Step table kept (the default), then without it (--no-step-table).
            for ff, table, mode in ((False, True, "step-by-step"), (True, True, "fast-forward"),
                                    (False, False, "step, lean"), (True, False, "ff, lean")):
                dt, ev, steps, dec = timed(w, policy, ff, cost, blocks, record_steps=table)
                base = base or dt
                print(f"{name[:-4]:<22}{policy:<12}{mode:<14}"
                      f"{dt:>8.2f}{len(w) / dt:>10.0f}{ev / dt:>10.0f}{steps:>9}{steps / ev:>12.2f}"
                      f"{steps / dec:>15.2f}{base / dt:>8.1f}x")
                stepped = dt if mode == "step, lean" else stepped
                if mode == "ff, lean" and name.endswith("conv.csv") and not args.quick:
                    conv[policy] = (dt, len(w) / dt, stepped / dt, steps / dec)  # both lean
            if args.profile and name.endswith("conv.csv"):
                profile(w, policy, cost, blocks)
    long_replies(args.quick, cost, blocks)
    # Each synthetic size in a fresh process, so that its peak memory is its own.
    for n in (args.synthetic // 10, args.synthetic):
        out = subprocess.run([sys.executable, __file__, "--modes", "--synthetic-only", str(n)], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        print(out, end="", flush=True)
    if conv:
        targets(conv, n, float(out.split()[4]))  # its first row's wall seconds


def targets(conv: dict[str, tuple], n: int, synthetic_s: float) -> None:
    """Issue #8's targets against this run's figures."""
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"
    print("targets (issue #8; fast-forward without a step table):")
    for policy, (dt, rate, gain, per_decision) in conv.items():
        print(f"  conv trace, {policy}: {dt:.2f} s < 1 s and {rate:,.0f} > 20,000 req/s: "
              f"{verdict(dt < 1 and rate > 20_000)}; {gain:.1f}x >= 20x over step-by-step (lean): "
              f"{verdict(gain >= 20)} (it would be {per_decision:.1f}x at most if a decision "
              f"cost no more than a stepped step: steps/decision)")
    if n == 1_000_000:
        print(f"  1,000,000 requests: {synthetic_s:.1f} s < 60 s: {verdict(synthetic_s < 60)}")


def long_replies(quick: bool, cost, blocks) -> None:
    """Where fast-forward pays most: long replies (reasoning-style, ~4,000 tokens) at a
    load where scheduling events are rare next to steps."""
    w = build_workload(WorkloadConfig(
        source="chat", num_requests=300 if quick else 1500, rate=0.5,
        output=LengthSpec(dist="lognormal", mean=4000, sigma=0.5, max=16000)))
    base = None
    for ff, mode in ((False, "step, lean"), (True, "ff, lean")):
        dt, ev, steps, dec = timed(w, "chunked", ff, cost, blocks, record_steps=False)
        base = base or dt
        print(f"{'long replies':<22}{'chunked':<12}{mode:<14}{dt:>8.2f}{len(w) / dt:>10.0f}"
              f"{ev / dt:>10.0f}{steps:>9}{steps / ev:>12.2f}{steps / dec:>15.2f}"
              f"{base / dt:>8.1f}x", flush=True)


def rss_mib(field: str) -> float:
    """VmRSS (now) or VmHWM (peak) of this process, from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def synthetic(n: int, cost, blocks) -> None:
    w = build_workload(WorkloadConfig(source="chat", num_requests=n, rate=12.0))
    before = rss_mib("VmRSS")
    left, rss = [0], {}  # RSS when each tenth of the requests has left

    def progress(k: int) -> None:
        left[0] += k
        if left[0] % (n // 10 or 1) == 0:
            rss[left[0]] = rss_mib("VmRSS")
    with counting_events() as events:
        t0 = time.perf_counter()
        r = simulate(w, SchedulerConfig(policy="chunked"), cost, blocks, record_steps=False,
                     progress=progress)
        dt = time.perf_counter() - t0
    steps = r.summary()["num_steps"]
    print(f"{'chat synthetic':<22}{'chunked':<12}{'fast-forward':<14}{dt:>8.2f}{n / dt:>10.0f}"
          f"{events[0] / dt:>10.0f}{steps:>9}")
    first, last = min(rss), max(rss)
    growth = (rss[last] - rss[first]) * 2**20 / max(1, last - first)
    print(f"  {n} requests, no step table: RSS {before:.0f} MiB before the run, {rss[first]:.0f} "
          f"MiB when {first} had left, {rss[last]:.0f} MiB when all had ({growth:.0f} bytes more "
          f"per request that left); peak {rss_mib('VmHWM'):.0f} MiB (with the result tables)",
          flush=True)


if __name__ == "__main__":
    main()
