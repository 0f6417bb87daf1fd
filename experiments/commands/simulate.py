"""`batchlab simulate`: run an experiment in simulated time, one run per policy."""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

from batchlab import sim
from batchlab.core import atomic
from batchlab.core.class_summary import breakdowns
from batchlab.core.model.hardware import DATASHEET_FIELDS
from batchlab.core.result import check_finite
from batchlab.core.sizes import check_run_size
from batchlab.core.stability import queue_stability
from batchlab.core.workload import build_workload
from batchlab.experiments import listing
from batchlab.experiments.disaggregation.command import simulate_pools
from batchlab.experiments.disaggregation.options import add_deployment_options
from batchlab.experiments.errors import UserError
from batchlab.experiments.executor import add_executor_options, cores, make_executor
from batchlab.experiments.kv_tier_options import add_kv_tier_options
from batchlab.experiments.limits import check_samples
from batchlab.experiments.options import (add_common_options, add_plot_option, load_experiment, named,
                                          reject_unused_fields)
from batchlab.experiments.output import ResultWriter, to_json
from batchlab.experiments.progress import progress_bar
from batchlab.experiments.repeats import repeats_summary, repeats_table
from batchlab.experiments.replica_split import check_split, simulate_split
from batchlab.experiments.report import comparison_table, footer
from batchlab.experiments.roofline_options import add_roofline_options
from batchlab.experiments.seed_effect import check_seeds_vary
from batchlab.experiments.setup import SIMULATE_EXPERIMENT, sim_setup
from batchlab.experiments.speculative_options import add_speculative_options

# [model] and [run] fields only the torch backend reads (batchlab run, validate).
_BACKEND = "the simulator prices the model preset (or profile) on [hardware]; it is a backend setting"
BACKEND_ONLY = {"model.device": _BACKEND, "model.threads": _BACKEND,
                "model.kv_memory": "the KV pool comes from [hardware] memory or --num-kv-blocks",
                "model.matmul": _BACKEND, "model.attention": _BACKEND, "model.fused": _BACKEND,
                "model.cuda_graphs": _BACKEND, "model.one_row_decode": _BACKEND,
                "run.time_scale": "replays run on the wall clock only (use [workload] rate_scale)",
                "run.temperature": "sampling does not change simulated timings"}
# What a profile replaces: its fitted cost model prices its own device and dtype.
_PROFILED = "a profile's fitted cost model prices the device and dtype it was measured on"
PROFILE_REPLACES = {f"hardware.{f}": _PROFILED for f in (
    "mem_efficiency", "compute_efficiency", "step_overhead_s", "allreduce_latency_s",
    "gpu_memory_utilization", "pipeline_parallel", "expert_parallel", "data_parallel_attention",
    *DATASHEET_FIELDS, "cost", "gpu_profile", "knobs")} | {"model.dtype": _PROFILED, "model.kv_cache_dtype": _PROFILED}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("simulate", help="simulate serving a workload (default: embedded demo)",
                              description=__doc__)
    add_common_options(p)
    add_roofline_options(p)
    add_kv_tier_options(p)
    add_speculative_options(p)
    g = p.add_argument_group("simulator")
    g.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="run N seeds (the workload's seed, +1, ...): each metric's mean with a "
                        "95%% confidence interval, and each policy's paired difference against the first")
    g.add_argument("--no-step-table", dest="step_table", action="store_false",
                   help="keep step totals only, no steps.csv: for replays of millions of requests")
    g.add_argument("--step-by-step", action="store_true",
                   help="simulate every step (no fast-forward over steady decode runs; same results)")
    add_plot_option(g)
    add_deployment_options(p)
    add_executor_options(p, "split round-robin replicas across N local processes, merged into the "
                            "same results (default 1: one process)")
    g.add_argument("--list-policies", action="store_true",
                   help="list the policies (with their parameters), admission and victim orders, and exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.list_policies:
        print(to_json(listing.registry()) if args.format == "json" else listing.render())
        return 0
    if args.seeds < 1:
        raise UserError(f"--seeds must be >= 1, got {args.seeds}")
    cfg = load_experiment(args, SIMULATE_EXPERIMENT)
    reject_unused_fields(cfg, "simulate", BACKEND_ONLY)
    if cfg.profile.path:
        reject_unused_fields(cfg, "simulate --profile", PROFILE_REPLACES)
    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers must be >= 1, got {args.workers}")
    split = bool(args.dask) or (args.workers or 1) > 1
    if cfg.deployment is not None:  # prefill and decode pools: experiments/disaggregation
        if split:
            raise UserError("--workers/--dask: prefill and decode pools hand requests to each "
                            "other; run with --workers 1")
        return simulate_pools(cfg, args, cfg.record(tuple(BACKEND_ONLY)))
    check_samples(f"--seeds {args.seeds}", args.seeds)
    seeds = [cfg.workload.seed + i for i in range(args.seeds)]
    first = build_workload(cfg.workload.model_copy(update={"seed": seeds[0]}))
    if len(seeds) > 1:  # every seed's workload is held: refuse what cannot fit, up front
        check_samples(f"--seeds {args.seeds}", args.seeds, len(first))
    workloads = {s: first if s == seeds[0] else build_workload(cfg.workload.model_copy(update={"seed": s}))
                 for s in seeds}
    seeds_vary = check_seeds_vary(cfg.workload, len(seeds), built=list(workloads.values()))
    # Every setting is checked before an earlier run's results in --out are cleared.
    setup = sim_setup(cfg, named(args, "model"), named(args, "hardware"))
    try:
        check_run_size(len(workloads[seeds[0]]), cfg.run.replicas, setup.blocks)
    except ValueError as e:
        raise UserError(f"{e} (--replicas, --num-kv-blocks, --num-requests)") from None
    split = split and cfg.run.replicas > 1  # one replica: nothing to split
    if split:
        check_split(cfg, setup, workloads[seeds[0]])
    weights, kv = setup.meta.served_dtypes
    ran = {"model.dtype": weights, "model.kv_cache_dtype": kv}
    if args.plot:
        from batchlab.experiments.run_plots import check_plot_dir  # lazy: matplotlib, only with --plot
        check_plot_dir(args.plot, args.step_table)
    writer = ResultWriter(args.out, cfg.record(tuple(BACKEND_ONLY), ran)) if args.out else None
    kept: dict | None = {} if args.plot else None  # the first seed's runs, for --plot
    runs: dict[str, list[dict]] = {p: [] for p in setup.schedulers}
    interrupted = False
    # A forked pool's workers inherit the workloads: nothing of them is pickled.
    executor = make_executor(args.workers, args.dask, hold=list(workloads.values())) if split \
        else nullcontext((None, ""))
    with executor as (ex, _where):
        for seed, workload in workloads.items():
            for policy, scheduler in setup.schedulers.items():
                name = policy if len(seeds) == 1 else f"{policy}-seed{seed}"
                summary, interrupted = _simulate_one(name, workload, scheduler, setup, cfg, args, writer,
                                                     kept if seed == seeds[0] else None, seed, (ex, policy))
                runs[policy].append(summary)
                if interrupted:
                    break  # Ctrl-C: keep what was simulated, run no further policy
            if interrupted:
                break
    workload = workloads[seeds[0]]
    if kept:
        from batchlab.experiments.run_plots import write_run_plots  # lazy: matplotlib, only with --plot
        files = write_run_plots(args.plot, kept)
        print(f"plots: {', '.join(str(f) for f in files)}", file=sys.stderr)
    if len(seeds) > 1 and not interrupted:
        return _report_repeats(runs, seeds, seeds_vary, workload, setup, cfg, args, writer)
    summaries = {p: r[0] for p, r in runs.items() if r}
    if args.format == "json":
        print(to_json(summaries))
    else:
        _print_header(workload, setup, cfg)
        print(comparison_table(summaries))
        _print_footer(cfg, writer, summaries)
    return 130 if interrupted else 0


def _simulate_one(name, workload, scheduler, setup, cfg, args, writer, kept=None, seed=0,
                  split=(None, "")) -> tuple[dict, bool]:
    """split: (the executor that runs the replicas in groups, or None, and the policy)."""
    executor, policy = split
    t0 = time.perf_counter()
    with progress_bar(total=len(workload), desc=name, unit="req", leave=False, mininterval=0.5) as bar:
        by_replica = None  # computed in the groups' processes, when split
        if executor is not None:  # the replicas in groups, on the executor's processes
            result, by_replica = simulate_split(executor, args.workers or cores(), cfg,
                                                (named(args, "model"), named(args, "hardware")), policy,
                                                workload, not args.step_by_step, args.step_table, bar.update)
        else:
            result = sim.simulate(workload, scheduler, setup.cost, setup.blocks,
                                  replicas=cfg.run.replicas, router=cfg.run.router, meta=setup.meta,
                                  fast_forward=not args.step_by_step, record_steps=args.step_table,
                                  progress=bar.update, keep_on_interrupt=True, front_end=setup.front_end,
                                  emission=setup.emission(seed), **setup.tier_options)
    # The breakdowns and the verdict beside the summary (numpy's passes let go of the GIL),
    # once the run's times are known finite (else the summary's error, alone, as before).
    check_finite(result)
    with ThreadPoolExecutor(1) as beside:
        later = beside.submit(_breakdowns_and_verdict, result.requests, cfg.run.slo, by_replica)
        summary = result.summary(cfg.run.slo, checked=True)
        broken_down, verdict = later.result()
    summary = {**summary, **broken_down}
    summary["stability"] = verdict
    interrupted = result.meta.interrupted
    print(f"[{name}] {summary['completed']:.0f}/{len(workload)} requests, "
          f"{summary['num_steps']} steps simulated in "
          f"{time.perf_counter() - t0:.2f} s" + (" (interrupted)" if interrupted else ""),
          file=sys.stderr)
    if writer:
        writer.add(name, result, summary)
    if kept is not None:
        kept[name] = result
    return summary, interrupted


def _breakdowns_and_verdict(requests, slo, by_replica) -> tuple[dict, str]:
    return breakdowns(requests, slo, by_replica), queue_stability(requests).verdict


def _print_header(workload, setup, cfg) -> None:
    meta = setup.meta
    seats = sorted(set(meta.max_num_seqs.values()))
    print(f"workload: {workload.describe()}")
    print(f"model {meta.model} on {cfg.hardware.gpus} x {meta.hardware}, "
          f"{setup.blocks} KV blocks of {cfg.scheduler.block_size} tokens, "
          f"{'/'.join(map(str, seats))} seats, {cfg.run.replicas} replica(s)")
    print("\n".join(setup.assumptions()) + "\n")


def _print_footer(cfg, writer, summaries: dict | None = None) -> None:
    text = footer(cfg.run.slo, summaries, writer.dir if writer else None)
    if text:
        print(text)


def _report_repeats(runs, seeds, seeds_vary, workload, setup, cfg, args, writer) -> int:
    names = list(runs)
    out = repeats_summary(runs, seeds)
    if writer:
        atomic.write_text(writer.dir / "repeats.json", to_json(out) + "\n")
    if args.format == "json":
        print(to_json(out))
        return 0
    _print_header(workload, setup, cfg)
    print(f"{len(seeds)} seeds ({seeds[0]}..{seeds[-1]}; {seeds_vary}): "
          f"mean ± 95% CI half-width"
          + (f"; paired differences against {names[0]}, * where the interval excludes 0 (never at "
             f"zero width)"
             if len(names) > 1 else ""))
    print(repeats_table(runs))
    for p in names:
        verdicts = out[p]["stability"]
        print(f"stability [{p}]: {verdicts.count('stable')}/{len(verdicts)} seeds stable")
    if all(len({str(sorted(r.items())) for r in runs[p]}) == 1 for p in names):
        print("note: every seed gave the same run (the requests differ, the runs do not)")
    _print_footer(cfg, writer)
    return 0
