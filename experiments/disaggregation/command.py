"""`batchlab simulate` with a [deployment] table: one disaggregated run per policy,
the usual table, each pool's use and the KV transfers; --out adds handoffs.csv beside
each run's tables."""
from __future__ import annotations

import argparse
import io
import sys
import time

import numpy as np

from batchlab.core import atomic
from batchlab.core.class_summary import breakdowns
from batchlab.core.workload import build_workload
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.disaggregation.setup import pd_setup
from batchlab.experiments.errors import UserError
from batchlab.experiments.options import named
from batchlab.experiments.output import ResultWriter, to_json
from batchlab.experiments.progress import progress_bar
from batchlab.experiments.report import comparison_table, footer
from batchlab.sim.disaggregated import simulate_disaggregated
from batchlab.sim.disaggregated.summary import disaggregated_summary, stability

POOL_ROWS: list[tuple[str, str, str]] = [
    ("gpus", "GPUs (both pools)", "{:.0f}"),
    ("prefill_busy_fraction", "prefill pool stepping", "{:.1%}"),
    ("prefill_slot_utilization", "prefill seats in use", "{:.1%}"),
    ("decode_busy_fraction", "decode pool stepping", "{:.1%}"),
    ("decode_slot_utilization", "decode seats in use", "{:.1%}"),
    ("decode_seats_full_fraction", "decode seats all full", "{:.1%}"),
    ("decode_kv_utilization", "decode KV in use", "{:.1%}"),
    ("kv_transfers", "KV transfers", "{:.0f}"),
    ("kv_transfer_bytes", "KV bytes moved (GB)", "{:.2f}"),
    ("mean_kv_transfer_ms", "KV transfer mean (ms)", "{:.2f}"),
    ("p99_kv_transfer_ms", "KV transfer p99 (ms)", "{:.2f}"),
    ("mean_kv_link_wait_ms", "link wait mean (ms)", "{:.2f}"),
    ("mean_decode_queue_ms", "decode queue mean (ms)", "{:.1f}"),
    ("prefill_stability", "prefill queue", "{}"),
    ("decode_stability", "decode queue", "{}"),
    ("request_goodput_per_gpu", "goodput per GPU (req/s)", "{:.3f}"),
]


def simulate_pools(cfg: ExperimentConfig, args: argparse.Namespace, record: dict) -> int:
    """record: what config.json records (the caller's cfg.record(...))."""
    if args.seeds != 1:
        raise UserError("--seeds: one seed a run with [deployment] (the pools' runs are not repeated)")
    if args.plot:
        raise UserError("--plot: not drawn for a run with [deployment]; --out writes its tables")
    workload = build_workload(cfg.workload)
    setup = pd_setup(cfg, named(args, "model"), named(args, "hardware"))
    writer = ResultWriter(args.out, record) if args.out else None
    summaries: dict[str, dict] = {}
    for name in setup.runs:
        t0 = time.perf_counter()
        with progress_bar(total=len(workload), desc=name, unit="req", leave=False, mininterval=0.5) as bar:
            run = simulate_disaggregated(workload, setup.deployment(name), meta=setup.decode.meta,
                                         fast_forward=not args.step_by_step, record_steps=args.step_table,
                                         progress=bar.update, keep_on_interrupt=True)
        s = {**disaggregated_summary(run, cfg.run.slo), **breakdowns(run.result.requests, cfg.run.slo)}
        s["stability"] = stability(run)  # either pool's queue growing overloads it
        summaries[name] = s
        print(f"[{name}] {s['completed']:.0f}/{len(workload)} requests, {s['num_steps']} steps "
              f"simulated in {time.perf_counter() - t0:.2f} s", file=sys.stderr)
        if writer:
            writer.add(name, run.result, s)
            atomic.write_text(writer.dir / name / "handoffs.csv", _csv(run.handoffs.table()))
        if run.result.meta.interrupted:
            break
    if args.format == "json":
        print(to_json(summaries))
        return 0
    meta = setup.decode.meta
    print(f"workload: {workload.describe()}")
    print(f"model {meta.model} on {meta.hardware}, blocks of {cfg.scheduler.block_size} tokens")
    print("\n".join([*setup.decode.assumptions(), *setup.assumptions()]) + "\n")
    print(comparison_table(summaries))
    shown = {n: {**s, "kv_transfer_bytes": s["kv_transfer_bytes"] / 1e9} for n, s in summaries.items()}
    print("\n" + comparison_table(shown, POOL_ROWS))
    text = footer(cfg.run.slo, summaries, writer.dir if writer else None)
    if text:
        print(text)
    return 0


def _csv(table: dict[str, np.ndarray]) -> str:
    out = io.StringIO()
    out.write(",".join(table) + "\n")
    cols = [v.tolist() for v in table.values()]
    for row in zip(*cols):
        out.write(",".join(repr(v) if isinstance(v, float) else str(v) for v in row) + "\n")
    return out.getvalue()
