"""`batchlab run`: the same experiment as `batchlab simulate`, served for real by the
torch backend on the wall clock, one run per policy. Same tables, same summary."""
from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from batchlab.core.class_summary import breakdowns
from batchlab.core.workload import build_workload
from batchlab.experiments.errors import UserError
from batchlab.experiments.kv_tier_options import add_kv_tier_options, check_backend_tier, tier_price
from batchlab.experiments.machine_speed import describe as describe_speed
from batchlab.experiments.options import (add_backend_options, add_common_options, add_plot_option, load_experiment,
                                          reject_unused, reject_unused_fields, reject_unused_tables)
from batchlab.experiments.output import ResultWriter, check_out_dir, to_json
from batchlab.experiments.report import comparison_table, footer
from batchlab.experiments.run_labels import label_real
from batchlab.experiments.setup import RUN_EXPERIMENT, load_runtime
from batchlab.experiments.speculative_options import add_speculative_options, check_run_speculative, write_acceptance
from batchlab.experiments.validation import profile_source
from batchlab.experiments.validation.speculative import drafted

if TYPE_CHECKING:
    from batchlab.core.run_meta import RunMeta


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="serve a workload for real on the torch backend",
                              description=__doc__)
    add_common_options(p)
    g = add_backend_options(p)
    g.add_argument("--time-scale", dest="ru_time_scale", type=float, metavar="K",
                   help="multiply arrival times by K (0.5: twice as fast; 0: all at once)")
    g.add_argument("--temperature", dest="ru_temperature", type=float, metavar="T",
                   help="0: greedy (default)")
    add_plot_option(g)
    add_kv_tier_options(p)
    add_speculative_options(p)
    p.add_argument("--acceptance-out", metavar="CSV",
                   help="with --speculative: write the measured acceptance (every policy's runs "
                        "pooled) for simulate --acceptance-file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    reject_unused(args, "run", {"hw_name": "it serves on this machine's device (--device)",
                   "hw_tensor_parallel": "the backend runs on one device",
                   "ru_router": "it serves one replica"})
    cfg = load_experiment(args, RUN_EXPERIMENT)
    reject_unused_fields(cfg, "run", {"run.router": "it serves one replica",
                                      "model.kv_cache_dtype": "the backend keeps its KV cache "
                                      "in the model's dtype ([model] dtype, --dtype)"})
    reject_unused_tables(cfg, "run", {"hardware": "it serves on this machine's device (--device)"})
    # --profile: prices the run's steady decode steps, to measure the machine's speed.
    profile = profile_source.load(cfg.profile.path) if cfg.profile.path else None
    if cfg.run.replicas != 1:
        raise UserError(f"batchlab run serves one replica; got replicas={cfg.run.replicas}")
    check_backend_tier(cfg.kv_tier, priced=profile is not None)
    check_run_speculative(cfg, args.acceptance_out)
    workload = build_workload(cfg.workload)
    if args.out:
        check_out_dir(args.out)  # before the model loads
    if args.plot:
        from batchlab.experiments.run_plots import check_plot_dir  # lazy: matplotlib, only with --plot
        check_plot_dir(args.plot)
    t0 = time.perf_counter()
    rt = load_runtime(cfg)
    from batchlab.backend.device import dtype_name  # lazy: torch, loaded with the model by now
    from batchlab.backend.driver import run_workload  # lazy: torch, as above
    from batchlab.backend.models import params_label  # lazy: torch, as above

    print(f"model {rt.model.name} loaded in {time.perf_counter() - t0:.1f} s "
          f"({params_label(rt.spec.params)} params, {cfg.model.dtype} on {rt.device}, "
          f"{rt.threads} thread(s))", file=sys.stderr)
    speed_cost, speed_source = profile_source.speed_pricing(profile, cfg.profile.path, rt)
    # Every setting is checked before an earlier run's results in --out are cleared.
    schedulers = cfg.schedulers(rt.spec.max_context)
    for sched in schedulers.values():  # the KV pool: refused now, before --out is written
        rt.pool_blocks(sched.num_kv_blocks, sched.block_size)
    ran = {"model.dtype": dtype_name(rt.dtype), "model.device": str(rt.device),
           "model.threads": rt.threads}
    writer = ResultWriter(args.out, cfg.record(("hardware", "profile", "model.kv_cache_dtype"), ran)
                          ) if args.out else None
    summaries, metas, results = {}, {}, {}
    for policy, sched in schedulers.items():
        with profile_source.probe_around(rt.device, speed_cost is None) as probe:
            result = run_workload(rt, workload, sched, time_scale=cfg.run.time_scale,
                                  temperature=cfg.run.temperature, seed=cfg.workload.seed,
                                  progress=not args.no_progress, kv_tier=cfg.kv_tier,
                                  recompute_seconds=tier_price(cfg.kv_tier, speed_cost),
                                  speculative=cfg.speculative)
        # meta: machine_speed (each step priced with the draft's passes where it drafted), stability
        label_real(result, drafted(speed_cost, result.meta.speculative) if speed_cost is not None else None,
                   speed_source, probe)
        summaries[policy] = {**result.summary(cfg.run.slo), **breakdowns(result.requests, cfg.run.slo),
                             "stability": result.meta.stability.verdict}
        metas[policy] = result.meta
        if args.plot:
            results[policy] = result
        m = result.meta
        print(f"[{policy}] {summaries[policy]['completed']:.0f}/{len(workload)} requests, "
              f"{m.steps} steps in {m.wall_s:.1f} s; engine {m.engine_forward_s:.1f} s, "
              f"scheduler overhead {m.scheduler_overhead_ms_per_step:.2f} ms/step"
              + (" (interrupted)" if m.interrupted else ""), file=sys.stderr)
        if writer:
            writer.add(policy, result, summaries[policy])
        if m.interrupted:
            break  # Ctrl-C: keep what finished, run no further policy
    if args.acceptance_out:
        write_acceptance(args.acceptance_out, cfg.speculative.num_speculative_tokens, metas.values())
    if results:
        from batchlab.experiments.run_plots import write_run_plots  # lazy: matplotlib, only with --plot
        files = write_run_plots(args.plot, results)
        print(f"plots: {', '.join(str(f) for f in files)}", file=sys.stderr)
    if args.format == "json":
        print(to_json(summaries))
    else:
        m = next(iter(metas.values()))
        print(f"workload: {workload.describe()}")
        print(f"model {m.model} ({m.dtype}, {m.device}, {m.threads} thread(s)), "
              f"{m.num_kv_blocks} KV blocks of {m.block_size} tokens, "
              f"{cfg.scheduler.max_num_seqs} seats, time scale {cfg.run.time_scale:g}\n")
        print(comparison_table(summaries))
        print(labels_line(metas))
        text = footer(cfg.run.slo, summaries, writer.dir if writer else None)
        if text:
            print(text)
    return 130 if any(m.interrupted for m in metas.values()) else 0


def labels_line(metas: dict[str, RunMeta]) -> str:
    """The machine's measured speed during each run, one line."""
    parts = []
    for policy, m in metas.items():
        ms = m.machine_speed
        k, probe = ms.factor, ms.probe
        if k is not None:
            kc = ms.compute_factor
            parts.append(f"{policy}: steady decode steps {k:.3f}"
                         + (f", compute-bound steps' FLOP terms {kc:.3f}," if kc is not None else "")
                         + f" x the price of {ms.profile}"
                         + (f" (moving {ms.drift * 100:.0f}% within the run)" if ms.drift else "")
                         + f" [{describe_speed(ms)}]")
        elif probe:
            b, a = probe["before"], probe["after"]
            parts.append(f"{policy}: no profile of this setup; reference probe read "
                         f"{b['read_bandwidth'] / 1e9:.1f} / {a['read_bandwidth'] / 1e9:.1f} GB/s, "
                         f"matmul {b['matmul_flops'] / 1e9:.0f} / {a['matmul_flops'] / 1e9:.0f} "
                         f"GFLOP/s before / after")
        else:
            parts.append(f"{policy}: not measured ({ms.why or 'no profile'})")
    return "machine speed: " + "; ".join(parts)
