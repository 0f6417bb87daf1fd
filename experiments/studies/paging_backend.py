"""The paging study on the real backend (reduced): batchlab-tiny on the CPU torch
backend serves a small request list under the 2 x 2 grid, everything at t=0 so that the
simulator (same scheduler, same pool) takes the very same decisions; its preemptions and
concurrency are reported beside the measured ones. Imported only with --backend."""
from __future__ import annotations

from batchlab.core.cost import LinearCostModel
from batchlab.experiments.studies.common import Progress, RowLog, pick
from batchlab.experiments.studies.common_backend import machine, serve
from batchlab.experiments.studies.paging_setup import COLUMNS, GRID, label, measure, scheduler, workload
from batchlab.sim import simulate

PARAMS = {
    "full": dict(requests=32, prompt=(16, 64), output=(8, 96), seats=16, block=8, blocks=80),
    "small": dict(requests=16, prompt=(16, 48), output=(8, 64), seats=8, block=8, blocks=40),
}
BACKEND_COLUMNS = (*COLUMNS, "sim_preemptions", "sim_mean_concurrency", "same_decisions")


def run(out_dir, size: str, progress: Progress) -> dict:
    p = pick(PARAMS, size)
    w = workload(p["requests"], p["prompt"], p["output"], users=None)
    rows = {}
    with RowLog(out_dir / "backend_results.csv", BACKEND_COLUMNS) as log:
        for batching, allocation in GRID:
            cfg = scheduler(batching, allocation, p["seats"], p["block"], p["blocks"])
            real = serve(w, cfg)
            # Equal step times cannot matter here (all at t=0): the simulator's decisions
            # must be the backend's, step for step.
            sim = simulate(w, cfg, LinearCostModel(0.01), p["blocks"])
            row = measure("real", batching, allocation, real, p["block"], p["blocks"])
            s = measure("sim", batching, allocation, sim, p["block"], p["blocks"])
            same = all((real.steps[c] == sim.steps[c]).all() for c in ("num_seqs", "prefill_tokens",
                                                                        "num_preempted"))
            row.update(sim_preemptions=s["preemptions"], sim_mean_concurrency=s["mean_concurrency"],
                       same_decisions=bool(same and len(real.steps["num_seqs"]) == len(sim.steps["num_seqs"])))
            rows[label(batching, allocation)] = log.add(row)
            progress(f"backend {label(batching, allocation)}: {row['mean_concurrency']:.1f} concurrent, "
                     f"{row['output_throughput']:.0f} tok/s, {row['preemptions']} preemptions")
    return {"machine": machine(), "workload": w.describe(), "pool": f"{p['blocks']} blocks of "
            f"{p['block']} tokens ({p['blocks'] * p['block']} tokens)", "seats": p["seats"],
            "rows": rows, "files": ["backend_results.csv"]}
