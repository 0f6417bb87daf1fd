"""Many replicas: does an arrival cost only the replica it is routed to? (issue 48 item 2)

    python benchmarks/bench_replicas.py [--replicas 64] [--requests N] [--scaling R1,R2]

The Azure conversation trace (../shared/traces) on one replica, then over R replicas
at R times its rate (round_robin, continuous, step table kept, Llama-3-8B / A100-80GB
roofline), in this process, one after the other: CPU seconds per request and decisions
(engine iterations: a step or a fast-forward run) per request for each, and the ratios
R / 1. With the fast-forward exact, an arrival that cut only its own replica's run would
leave both ratios near 1. --scaling R1,R2: the synthetic chat workload at 1 request/s per
replica, 20 requests a replica, no step table (a lone request's every step would be a
row), over R1 then R2 replicas: CPU per request at each
(linear: the ratio near 1). Ratios from one run; the machine's load is printed (shared).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batchlab.core.config import SchedulerConfig  # noqa: E402
from batchlab.core.cost.dispatch import kv_capacity_blocks, roofline  # noqa: E402
from batchlab.core.model.presets import lookup_hardware, lookup_model  # noqa: E402
from batchlab.core.workload import WorkloadConfig, build_workload  # noqa: E402
from batchlab.sim import simulate  # noqa: E402
from batchlab.sim.counting import counting_decisions  # noqa: E402

TRACES = next((p for p in [Path(os.environ.get("BATCHLAB_TRACES", "/nonexistent"))]
               + [Path(__file__).resolve().parents[k] / "shared" / "traces" for k in (2, 3)]
               if p.is_dir()), Path("/work/shared/traces"))


def run(workload, replicas: int, cost, blocks, table: bool = True) -> tuple[float, float]:
    """(CPU seconds per request, decisions per request) of one simulation."""
    with counting_decisions() as n:
        t0 = time.process_time()
        simulate(workload, SchedulerConfig(policy="continuous"), cost, blocks, replicas=replicas,
                 record_steps=table)
        cpu = time.process_time() - t0
    return cpu / len(workload), n[0] / len(workload)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--requests", type=int, default=None, help="first N rows of the trace")
    ap.add_argument("--scaling", default="", metavar="R1,R2", help="synthetic: replicas R1 then R2")
    args = ap.parse_args()
    model, hw = lookup_model("llama-3-8b"), lookup_hardware("a100-80gb")
    cost = roofline(model, hw, 1, 0.8, 0.6, 0.002)
    blocks = kv_capacity_blocks(model, hw, 1, 16)
    pure = os.environ.get("BATCHLAB_PURE", "") not in ("", "0")
    print(f"build {'pure' if pure else 'compiled'}, load {os.getloadavg()[0]:.2f} (1 min)")
    trace = str(TRACES / "azure2023_conv.csv")
    rows = {}
    for r in (1, args.replicas):
        w = build_workload(WorkloadConfig(source=trace, num_requests=args.requests, rate_scale=r))
        rows[r] = run(w, r, cost, blocks)
        print(f"conv x{r:<4} over {r:>6} replicas: {len(w):>7} requests, "
              f"{rows[r][0] * 1e6:8.1f} CPU-us/request, {rows[r][1]:6.2f} decisions/request")
    one, many = rows[1], rows[args.replicas]
    print(f"ratio {args.replicas}/1: CPU per request {many[0] / one[0]:.2f}x (target <= 1.5x), "
          f"decisions per request {many[1] / one[1]:.2f}x")
    if args.scaling:
        a, b = (int(x) for x in args.scaling.split(","))
        per = {}
        for r in (a, b):
            w = build_workload(WorkloadConfig(source="chat", num_requests=20 * r, rate=float(r)))
            per[r] = run(w, r, cost, blocks, table=False)
            print(f"chat over {r:>7} replicas: {len(w):>8} requests, "
                  f"{per[r][0] * 1e6:8.1f} CPU-us/request, {per[r][1]:6.2f} decisions/request")
        print(f"scaling {a} -> {b} replicas: CPU per request {per[b][0] / per[a][0]:.2f}x (linear: ~1)")
    print(f"load {os.getloadavg()[0]:.2f} (1 min) at the end")


if __name__ == "__main__":
    main()
