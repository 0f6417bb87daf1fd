"""Prefix caching's cost to the simulator, measured in one run (ratios, not seconds: the
machine is shared and noisy).

    python benchmarks/bench_prefix.py [--quick] [--main /work/main]

1. Replays without prefix hashes (the Azure traces), fast-forward, continuous and
   chunked: this tree against another checkout (--main, default: none, part skipped),
   each timed in its own fresh subprocess, alternating, the best of 3. Target: at most
   10% slower.
2. The Mooncake trace (prefix hashes) with caching on against off, in this tree. Target:
   within 2x. Prints the hit rate and TTFT each way.
Llama-3-8B on A100-80GB (roofline), as benchmarks/bench_sim.py."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
TRACES = HERE.parent / "shared" / "traces"
if not TRACES.exists():
    TRACES = Path("/work/shared/traces")

# Run in a subprocess with PYTHONPATH at the tree to time: prints {"wall": s, ...}.
CHILD = r"""
import json, sys, time
from batchlab.core.config import SchedulerConfig
try:  # the step price's homes (2026-12-06); a baseline from before has flat modules
    from batchlab.core.cost.dispatch import kv_capacity_blocks, roofline
    from batchlab.core.model.presets import lookup_hardware, lookup_model
except ImportError:
    from batchlab.core.cost import kv_capacity_blocks, roofline
    from batchlab.core.specs import lookup_hardware, lookup_model
from batchlab.core.workload import WorkloadConfig, build_workload
from batchlab.sim import simulate
path, policy, n, caching = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
model, hw = lookup_model("llama-3-8b"), lookup_hardware("a100-80gb")
cost, blocks = roofline(model, hw, 1, 0.8, 0.6, 0.002), kv_capacity_blocks(model, hw, 1, 16)
w = build_workload(WorkloadConfig(source=path, num_requests=n or None))
kw = {} if caching == "default" else {"prefix_caching": caching == "on"}
cfg = SchedulerConfig(policy=policy, **kw)
t0 = time.perf_counter()
s = simulate(w, cfg, cost, blocks).summary()
print(json.dumps({"wall": time.perf_counter() - t0, "requests": len(w),
                  "hit_rate": s.get("prefix_cache_hit_rate"), "ttft_p50": s["median_ttft_ms"],
                  "ttft_p99": s["p99_ttft_ms"]}))
"""


def child(tree: Path, path: Path, policy: str, n: int, caching: str = "default") -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), policy, str(n), caching],
                         env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True, cwd=tree)
    return json.loads(out.stdout.strip().splitlines()[-1])


def best(runs: list[dict]) -> dict:
    return min(runs, key=lambda r: r["wall"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="first 3000 requests of each trace")
    ap.add_argument("--main", type=Path, help="another checkout to compare against (main)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n = 3000 if args.quick else 0
    if args.main:
        print(f"1. no prefix hashes: this tree ({HERE}) against {args.main}, fast-forward")
        print(f"{'trace':<18}{'policy':<12}{'main s':>8}{'this s':>8}{'this/main':>10}")
        for name in ("azure2023_conv.csv", "azure2023_code.csv"):
            for policy in ("continuous", "chunked"):
                a, b = [], []
                for _ in range(args.repeat):  # alternate, so drift hits both alike
                    a.append(child(args.main, TRACES / name, policy, n))
                    b.append(child(HERE, TRACES / name, policy, n))
                ta, tb = best(a)["wall"], best(b)["wall"]
                print(f"{name[:-4]:<18}{policy:<12}{ta:>8.2f}{tb:>8.2f}{tb / ta:>9.3f}x")
    print("2. mooncake (prefix hashes), this tree: caching on against off, fast-forward")
    print(f"{'policy':<12}{'caching':<9}{'wall s':>8}{'hit rate':>10}{'TTFT p50 ms':>13}"
          f"{'TTFT p99 ms':>13}{'on/off':>8}")
    path = TRACES / "mooncake_synthetic.jsonl"
    for policy in ("continuous", "chunked"):
        off = best([child(HERE, path, policy, n, "off") for _ in range(args.repeat)])
        on = best([child(HERE, path, policy, n, "on") for _ in range(args.repeat)])
        for label, r in (("off", off), ("on", on)):
            ratio = f"{on['wall'] / off['wall']:>7.2f}x" if label == "on" else ""
            print(f"{policy:<12}{label:<9}{r['wall']:>8.2f}{r['hit_rate']:>10.3f}"
                  f"{r['ttft_p50']:>13.1f}{r['ttft_p99']:>13.1f}{ratio}")


if __name__ == "__main__":
    main()
