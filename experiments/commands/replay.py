"""`batchlab replay`: send a workload to an OpenAI-compatible server (batchlab serve,
vLLM, SGLang, ...) at its arrival times or as a closed loop, with exact output lengths,
and measure TTFT, TPOT, ITL and E2E latency from the streams as `vllm bench serve` does.
Writes the requests.csv and summary.json of simulate and run, and vLLM's result JSON."""
from __future__ import annotations

import argparse
import sys

from batchlab.core import atomic
from batchlab.core.workload import build_workload
from batchlab.experiments.errors import UserError
from batchlab.experiments.options import load_experiment, reject_unused_tables
from batchlab.experiments.output import ResultWriter, check_out_dir, to_json
from batchlab.experiments.replay.options import add_target_options
from batchlab.experiments.report import comparison_table, slo_line
from batchlab.experiments.setup import REPLAY_EXPERIMENT
from batchlab.experiments.workload_options import add_workload_options

NAME = "replay"  # the results' folder and summary key


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(NAME, help="send a workload to an OpenAI-compatible server, measure it",
                              description=__doc__)
    p.add_argument("--config", metavar="FILE.toml", help="experiment config (its [workload] is sent)")
    add_workload_options(p)
    add_target_options(p, required=True)
    p.add_argument("--model", metavar="NAME", help="the served model name (default: the first at /v1/models)")
    for slo in ("ttft", "tpot", "e2el"):
        p.add_argument(f"--slo-{slo}-ms", dest=f"slo_{slo}_ms", type=float, metavar="MS",
                       help=f"goodput: {slo.upper()} objective")
    p.add_argument("--out", metavar="DIR", help="write requests.csv, summary.json, result.json here")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run, policy=None)


def run(args: argparse.Namespace) -> int:
    from batchlab.experiments.replay.measure import measure  # lazy: httpx, not while parsing (--help)
    from batchlab.experiments.replay.results import failure_summary, vllm_bench_json  # lazy: httpx, as above

    cfg = load_experiment(args, REPLAY_EXPERIMENT)
    reject_unused_tables(cfg, NAME, {t: "the server decides it; replay only sends the workload"
                                     for t in ("scheduler", "hardware", "profile")})
    workload = build_workload(cfg.workload)
    if not len(workload):
        raise UserError("the workload has no requests")
    if args.out:
        check_out_dir(args.out)
    result, rep, target = measure(args, workload, args.model, cfg.workload.seed)
    summary = result.summary(cfg.run.slo)
    summary["failed"] = result.meta.failed
    summary["invalid"] = result.meta.invalid  # replies whose server's claims did not hold
    failures = failure_summary(rep)
    if args.out:
        writer = ResultWriter(args.out, cfg.model_dump())
        writer.add(NAME, result, summary)
        rate = cfg.workload.rate
        bench = vllm_bench_json(rep, summary, result.meta, "inf" if rate == float("inf") else rate,
                                cfg.workload.burstiness)
        atomic.write_text(writer.dir / "result.json", to_json(bench) + "\n")
    if args.format == "json":
        print(to_json({NAME: summary}))
    else:
        print(f"workload: {workload.describe()}\nendpoint: {target.url}, model {target.model}\n")
        print(comparison_table({NAME: summary}))
        if cfg.run.slo is not None:
            print(slo_line(cfg.run.slo))
        if args.out:
            print(f"\nresults written to {args.out}/")
    print(failures or f"batchlab replay: all {len(rep.outcomes)} requests finished", file=sys.stderr)
    if rep.interrupted:
        return 130
    return 1 if failures else 0
