"""Simulator speed: simulated requests per wall second, fast-forward vs step-by-step.

    python benchmarks/bench_sim.py [--quick] [--synthetic N] [--profile]

Full Azure traces (../shared/traces) on one replica of Llama-3-8B / A100-80GB
(roofline), continuous batching and chunked prefill; long replies (~4,000 tokens) at
low load; then a large synthetic workload (no step table: totals only) with its memory
during the run and its peak. "lean" rows keep no step table
(`simulate --no-step-table`). Each row but the synthetic ones is the best of 3 runs,
and ratios are against step-by-step in the same run (the machine is shared and noisy:
compare ratios, not absolute seconds).
--profile adds where the time goes on the conv trace: SimPy, scheduler, metrics...

steps/decision bounds what fast-forward can gain: a decision is one engine iteration (a
step, or a whole run), and every arrival, admission and finish still takes one. Stepping
decides once per step, so even if fast-forward's decisions cost no more than a step's,
it could gain at most steps/decision: ~5x on these traces (it gains ~3x, over equally
lean stepping); on long replies at low load the bound grows with the reply length."""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batchlab.core.config import SchedulerConfig  # noqa: E402
from batchlab.core.cost import kv_capacity_blocks, roofline  # noqa: E402
from batchlab.core.metrics import MetricsRecorder  # noqa: E402
from batchlab.core.specs import lookup_hardware, lookup_model  # noqa: E402
from batchlab.core.workload import LengthSpec, WorkloadConfig, build_workload  # noqa: E402
from batchlab.sim import simulate  # noqa: E402
from batchlab.sim.events import counting_events  # noqa: E402

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"


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


@contextmanager
def counting_decisions() -> Iterator[list[int]]:
    """Count engine iterations (each records one step or one run) inside the block."""
    count = [0]
    real = MetricsRecorder.record_step, MetricsRecorder.record_decode_run

    def counted(method):
        def wrapper(*args, **kw):
            count[0] += 1
            return method(*args, **kw)
        return wrapper
    MetricsRecorder.record_step, MetricsRecorder.record_decode_run = map(counted, real)
    try:
        yield count
    finally:
        MetricsRecorder.record_step, MetricsRecorder.record_decode_run = real


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true",
                    help="first 3000 requests of each trace; 100,000 synthetic unless --synthetic")
    ap.add_argument("--synthetic", type=int, help="requests in the synthetic run (default 1,000,000)")
    ap.add_argument("--profile", action="store_true", help="time by component on the conv trace")
    ap.add_argument("--synthetic-only", type=int, metavar="N", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.synthetic is None:
        args.synthetic = 100_000 if args.quick else 1_000_000
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
        out = subprocess.run([sys.executable, __file__, "--synthetic-only", str(n)], check=True,
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
