"""`batchlab capacity max-rate|replicas`: the highest rate a configuration carries
within SLOs, or the fewest replicas (per model / TP / GPU preset) that carry a load."""
from __future__ import annotations

import argparse
import sys

from batchlab.core import atomic
from batchlab.experiments.capacity import report
from batchlab.experiments.capacity import tasks as searches  # run_task read when called: tests patch it
from batchlab.experiments.capacity.deploy_command import run_deploy
from batchlab.experiments.capacity.pd_options import add_pd_options
from batchlab.experiments.capacity.options import add_criteria_options, check_samples, criteria_from
from batchlab.experiments.capacity.point import sample_configs
from batchlab.experiments.capacity.speculation import __doc__ as SPECULATION
from batchlab.experiments.capacity.speculation import add_speculation_options, run_speculation
from batchlab.experiments.capacity.tasks import build_tasks, busiest_window, setup_or_none
from batchlab.experiments.errors import UserError
from batchlab.experiments.executor import add_executor_options, make_executor, run_all
from batchlab.experiments.jsonl_log import JsonlLog
from batchlab.experiments.options import add_common_options, load_experiment
from batchlab.experiments.output import make_out_dir, to_json
from batchlab.experiments.progress import progress_bar
from batchlab.experiments.roofline_options import add_roofline_options
from batchlab.experiments.kv_tier_options import add_kv_tier_options
from batchlab.experiments.seed_effect import check_seeds_vary
from batchlab.experiments.setup import CAPACITY_EXPERIMENT, sim_setup
from batchlab.experiments.speculative_options import add_speculative_options

# max-rate's description: what capacity.search.search_max_rate does.
MAX_RATE = "Bisection on the rate scale from 1 (the workload as configured)."
DEPLOY = ("Every deployment of the space (models x GPUs x TP degrees x dtypes x seats x token budgets), "
          "each sized to its fewest replicas, cheapest per replica first; a deployment that cannot beat "
          "the runner-up found so far is searched no further. Prints the winner and the runner-up with "
          "their vLLM launch commands and what binds them.")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("capacity", help="capacity planning: max-rate | replicas | deploy | speculation",
                              description=__doc__)
    sub = p.add_subparsers(dest="capacity_command", required=True, parser_class=type(p))
    mr = sub.add_parser("max-rate", help="the highest request rate within the SLOs, with its band",
                        description=MAX_RATE)
    rp = sub.add_parser("replicas", help="the fewest replicas that carry a load within the SLOs")
    dp = sub.add_parser("deploy", help="the cheapest deployment (model, GPU, TP, dtype, seats, token "
                        "budget, replicas) that carries a load within the SLOs, with its vLLM command",
                        description=DEPLOY)
    for q in (mr, rp, dp):
        add_common_options(q)
        add_roofline_options(q)
        add_kv_tier_options(q)
        add_criteria_options(q)
        add_executor_options(q)
        q.add_argument("--sensitivity", action="store_true",
                       help="also search with every knob of the price (efficiencies, step overhead, "
                            "all-reduce latency; replicas: the traffic's rate) at each end of its range")
    mr.add_argument("--tolerance", type=float, default=0.02, metavar="F",
                    help="stop when the band is narrower than this share of the rate (default 0.02)")
    rp.add_argument("--candidate", action="append", metavar="MODEL:TP:HARDWARE",
                    help="a configuration to size (repeat or comma-separate); default: the config's")
    rp.add_argument("--max-replicas", type=int, default=256, metavar="N",
                    help="give up above N replicas (default 256)")
    for q in (rp, dp):
        q.add_argument("--busiest-window", type=float, metavar="S",
                       help="size for the busiest S seconds of the trace (in its own time)")
    add_deploy_options(dp)
    add_speculative_options(dp)
    sp = sub.add_parser("speculation", help="where speculative decoding stops paying: TPOT and "
                        "throughput with and without it, by batch size", description=SPECULATION)
    add_common_options(sp)
    add_roofline_options(sp)
    add_speculative_options(sp)
    add_speculation_options(sp)
    p.set_defaults(func=run)


SEARCHES = "searches.jsonl"  # one line per search as it finishes (kept if the run is killed)


def add_deploy_options(q: argparse.ArgumentParser) -> None:
    g = q.add_argument_group("the deployment space (comma-separated lists)")
    g.add_argument("--models", metavar="M1,M2", help="model presets (default: the config's model)")
    g.add_argument("--gpus", metavar="G1,G2", help="hardware presets (default: the config's hardware)")
    g.add_argument("--tp-options", default="1,2,4,8", metavar="1,2,4,8", help="TP degrees (default 1,2,4,8)")
    g.add_argument("--dtype-options", default="bf16,fp8", metavar="bf16,fp8",
                   help="weights dtypes, the KV cache alike (default bf16,fp8)")
    g.add_argument("--seats-options", default="256,1024", metavar="N,M",
                   help="max_num_seqs values (default 256,1024)")
    g.add_argument("--budget-options", default="1024,2048,8192", metavar="N,M",
                   help="max_num_batched_tokens values (default 1024,2048,8192)")
    g.add_argument("--pp-options", default="1", metavar="1,2",
                   help="pipeline-parallel degrees (default 1)")
    g.add_argument("--ep-options", default="off,on", metavar="off,on",
                   help="expert parallelism, for MoE models at TP > 1: off (experts sliced over TP), "
                        "on (whole experts spread over the TP GPUs) (default off,on)")
    g.add_argument("--router-options", metavar="R1,R2",
                   help="routers in front of the replicas to search (round_robin, least_loaded, "
                        "prefix_aware; default: --router's alone)")
    g.add_argument("--speculative-options", metavar="off,1,3",
                   help="speculation off, or the config's method (--speculative) at each draft length "
                        "(default: as configured)")
    g.add_argument("--kv-tier-options", metavar="off,cpu:64",
                   help="KV tiers to search: off, or cpu:GIB (a CPU tier of GIB GiB per GPU, launched as "
                        "vLLM's native offloading) (default: as configured, --kv-tier)")
    g.add_argument("--price", action="append", metavar="GPU=USD",
                   help="USD per GPU-hour of a GPU (repeat, one per GPU searched): rank by cost per "
                        "hour instead of GPUs")
    g.add_argument("--max-replicas", type=int, default=64, metavar="N",
                   help="give up on a deployment above N replicas (default 64)")
    add_pd_options(q)


def run(args: argparse.Namespace) -> int:
    if args.capacity_command == "deploy":
        return run_deploy(args)
    if args.capacity_command == "speculation":
        return run_speculation(args)
    cfg = load_experiment(args, CAPACITY_EXPERIMENT)
    check_samples(args.seeds, args.windows)
    criteria = criteria_from(cfg.run.slo, args.percentile, args.goodput, args.max_rejected_share,
                             args.count_too_long)
    if args.sensitivity and cfg.profile.path and args.capacity_command == "max-rate":
        raise UserError("--sensitivity moves the knobs of the price; a --profile has none, and max-rate "
                        "does not vary the traffic's rate (its answer)")
    kind = args.capacity_command
    if kind == "replicas" and args.busiest_window is not None:
        cfg = busiest_window(cfg, args.busiest_window)
    samples = sample_configs(cfg.workload, args.seeds, args.windows)
    seeds_vary = check_seeds_vary(cfg.workload, args.seeds, "--windows W")
    if kind == "max-rate" and not 0 < args.tolerance < 1:
        raise UserError(f"--tolerance must be in (0, 1), got {args.tolerance}")
    if kind == "replicas" and args.max_replicas < 1:
        raise UserError(f"--max-replicas must be >= 1, got {args.max_replicas}")
    tasks = build_tasks(kind, cfg, criteria, samples,
                        args.tolerance if kind == "max-rate" else args.max_replicas,
                        getattr(args, "candidate", None), args.sensitivity)
    for t in tasks:  # every configuration is checked before anything runs
        try:
            sim_setup(t[2])
        except UserError as e:
            if "leaves no KV memory" not in str(e):
                raise  # a model that does not fit is an answer (a row), not an error
    out = make_out_dir(args.out, cfg.model_dump()) if args.out else None
    log = JsonlLog(out / SEARCHES) if out else None

    def finished(i: int, a) -> None:  # each search on disk as it ends, at any worker count
        if log is not None:
            log.add({"task": i, "varied": list(tasks[i][0]) if tasks[i][0] is not None else None,
                     **report.answer_row(a, args.gpu_hour_price), "points": a.points})
        bar.update()

    try:
        with make_executor(args.workers, args.dask) as (ex, where), \
                progress_bar(total=len(tasks), desc=kind, unit="search", leave=False) as bar:
            answers = run_all(ex, searches.run_task, tasks, finished)
    except KeyboardInterrupt:
        kept = f"; the searches that finished are in {log.path}" if log is not None else ""
        print(f"batchlab: interrupted{kept}", file=sys.stderr)
        return 130
    finally:
        if log is not None:
            log.close()
    main = [a for t, a in zip(tasks, answers) if t[0] is None]
    sens = [(t[0], a) for t, a in zip(tasks, answers) if t[0] is not None]
    setups = {a.label: setup_or_none(t[2]) for t, a in zip(tasks, answers) if t[0] is None}
    text = report.render(kind, main, sens, criteria, cfg, setups, samples, args.gpu_hour_price, where,
                         seeds_vary)
    if out:
        files = report.write(out, main, sens, criteria, cfg, args.gpu_hour_price)
        atomic.write_text(out / "capacity.json", to_json(report.as_json(main, sens, args.gpu_hour_price, criteria)) + "\n")
        text += f"\nresults written to {out}/ ({', '.join(files)})"
    if args.format == "json":
        print(to_json(report.as_json(main, sens, args.gpu_hour_price, criteria)))
    else:
        print(text)
    return 0 if any(a.value is not None for a in main) else 1
