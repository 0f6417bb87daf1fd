"""`batchlab replay`: send a workload to an OpenAI-compatible server (batchlab serve,
vLLM, SGLang, ...) at its arrival times or as a closed loop, with exact output lengths,
and measure TTFT, TPOT, ITL and E2E latency from the streams as `vllm bench serve` does.
Writes the requests.csv and summary.json of simulate and run, and vLLM's result JSON."""
from __future__ import annotations

import argparse
import sys

from batchlab.core.workload import build_workload
from batchlab.experiments.errors import UserError
from batchlab.experiments.options import load_experiment, reject_unused_tables
from batchlab.experiments.output import ResultWriter, check_out_dir, to_json
from batchlab.experiments.replay.prompts import DEFAULT_VOCAB
from batchlab.experiments.replay.results import failure_summary, run_result, vllm_bench_json
from batchlab.experiments.replay.sender import replay
from batchlab.experiments.replay.target import API_KEY_ENV, make_target
from batchlab.experiments.report import comparison_table, slo_line
from batchlab.experiments.run_cmd import DEFAULT_EXPERIMENT
from batchlab.experiments.workload_options import add_workload_options

NAME = "replay"  # the results' folder and summary key
DEFAULT_REPLAY = {"workload": DEFAULT_EXPERIMENT["workload"]}  # the workload of `batchlab run`


def add_target_options(p: argparse.ArgumentParser, required: bool) -> None:
    """The endpoint options (replay; validate --endpoint)."""
    g = p.add_argument_group("endpoint")
    g.add_argument("--endpoint", required=required, metavar="URL",
                   help="the server, e.g. http://127.0.0.1:8000 (its /v1/completions is called)")
    g.add_argument("--api-key", metavar="KEY", help=f"Bearer token (default: ${API_KEY_ENV})")
    g.add_argument("--request-timeout", type=float, default=600.0, metavar="S",
                   help="a request not finished after S seconds fails (default 600)")
    g.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB, metavar="N",
                   help=f"prompt token ids are drawn below N (default {DEFAULT_VOCAB})")
    g.add_argument("--time-scale", type=float, default=1.0, metavar="K",
                   help="multiply arrival times by K (0: all at once)")


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


def measure(args: argparse.Namespace, workload, model: str | None, seed: int):
    """Replay `workload` against --endpoint: (RunResult, Replay, Target)."""
    if not args.time_scale >= 0 or args.time_scale == float("inf"):
        raise UserError(f"--time-scale must be a finite number >= 0, got {args.time_scale}")
    target = make_target(args.endpoint, model, args.api_key, timeout_s=args.request_timeout,
                         vocab_size=args.vocab_size, seed=seed)
    print(f"batchlab replay: {len(workload)} requests to {target.url} (model {target.model})",
          file=sys.stderr, flush=True)
    rep = replay(workload, target, time_scale=args.time_scale,
                 progress=not args.no_progress and sys.stderr.isatty())
    meta = {"endpoint": target.url, "model": target.model, "workload": workload.describe(),
            "time_scale": args.time_scale, "seed": seed, "vocab_size": target.vocab_size,
            "max_concurrency": workload.max_concurrency}
    return run_result(rep, meta), rep, target


def run(args: argparse.Namespace) -> int:
    cfg = load_experiment(args, DEFAULT_REPLAY)
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
    failures = failure_summary(rep)
    if args.out:
        writer = ResultWriter(args.out, cfg.model_dump())
        writer.add(NAME, result, summary)
        rate = cfg.workload.rate
        bench = vllm_bench_json(rep, summary, result.meta, "inf" if rate == float("inf") else rate,
                                cfg.workload.burstiness)
        (writer.dir / "result.json").write_text(to_json(bench) + "\n")
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

