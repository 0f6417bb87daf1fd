"""`batchlab simulate`: run an experiment in simulated time, one run per policy."""
from __future__ import annotations

import argparse
import logging
import sys
import time

from tqdm import tqdm

from core.cost import CostModel, kv_capacity_blocks, roofline
from core.specs import HardwareSpec, ModelSpec, lookup_hardware, lookup_model
from core.workload import build_workload
from experiments.calibrate_cmd import profile_setup
from experiments.config import ExperimentConfig
from experiments.errors import UserError
from experiments.options import add_common_options, load_experiment, named
from experiments.output import ResultWriter, to_json
from experiments.report import comparison_table, slo_line
from experiments.run_labels import stability
from sim import simulate

log = logging.getLogger("batchlab")

# The embedded default shows the seed's point: a chat mix whose replies vary widely
# (most short, a few very long) served by static, continuous and chunked batching.
DEFAULT_EXPERIMENT = {
    "workload": {"source": "chat", "num_requests": 1000, "rate": 14.0},
    "scheduler": {"max_num_seqs": 32},
    "model": {"name": "llama-3-8b"},
    "hardware": {"name": "a100-80gb"},
    "run": {"policies": ["static", "continuous", "chunked"], "slo": {"ttft_ms": 2000, "tpot_ms": 100}},
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("simulate", help="simulate serving a workload (default: embedded demo)",
                              description=__doc__)
    add_common_options(p)
    g = p.add_argument_group("simulator")
    g.add_argument("--no-step-table", dest="step_table", action="store_false",
                   help="keep step totals only, no steps.csv: for replays of millions of requests")
    g.add_argument("--step-by-step", action="store_true",
                   help="simulate every step (no fast-forward over steady decode runs; same results)")
    p.set_defaults(func=run)


def roofline_setup(cfg: ExperimentConfig) -> tuple[CostModel, int, dict]:
    """Roofline cost model and KV capacity from the model and hardware presets."""
    try:
        model = lookup_model(cfg.model.name)
        hw = lookup_hardware(cfg.hardware.name)
    except ValueError as e:
        raise UserError(str(e)) from None
    h = cfg.hardware
    cost = roofline(model, hw, h.tensor_parallel, h.mem_efficiency, h.compute_efficiency,
                    h.step_overhead_s)
    blocks = cfg.scheduler.num_kv_blocks or kv_capacity_blocks(
        model, hw, h.tensor_parallel, cfg.scheduler.block_size, h.gpu_memory_utilization)
    if cfg.scheduler.num_kv_blocks:
        _warn_if_kv_cannot_fit(cfg, model, hw)
    meta = {"model": model.name, "hardware": hw.name, "tensor_parallel": h.tensor_parallel,
            "cost_model": "roofline", "max_context": model.max_context}
    return cost, blocks, meta


def _warn_if_kv_cannot_fit(cfg: ExperimentConfig, model: ModelSpec, hw: HardwareSpec) -> None:
    """A KV pool given in blocks is the user's call, but one larger than all the memory
    the weights leave would price steps for memory the hardware does not have."""
    h, sc = cfg.hardware, cfg.scheduler
    try:
        most = kv_capacity_blocks(model, hw, h.tensor_parallel, sc.block_size, 1.0)
    except ValueError:
        most = 0  # the weights alone fill the memory
    if sc.num_kv_blocks > most:
        log.warning("scheduler.num_kv_blocks (--num-kv-blocks) %d exceeds the %d blocks of %d "
                    "tokens that fit in %d x %s memory after %s's weights; the results assume "
                    "memory the hardware does not have", sc.num_kv_blocks, most, sc.block_size,
                    h.tensor_parallel, hw.name, model.name)


def run(args: argparse.Namespace) -> int:
    cfg = load_experiment(args, DEFAULT_EXPERIMENT)
    workload = build_workload(cfg.workload)
    if cfg.profile.path:
        cost, blocks, meta = profile_setup(cfg, named(args, "model"), named(args, "hardware"))
    else:
        cost, blocks, meta = roofline_setup(cfg)
    # Every setting is checked before an earlier run's results in --out are cleared.
    schedulers = {p: cfg.scheduler_for(p, meta["max_context"]) for p in cfg.policies()}
    writer = ResultWriter(args.out, cfg.model_dump()) if args.out else None
    summaries = {}
    for policy, scheduler in schedulers.items():
        t0 = time.perf_counter()
        with tqdm(total=len(workload), desc=policy, unit="req", disable=not sys.stderr.isatty(),
                  leave=False, mininterval=0.5) as bar:
            result = simulate(workload, scheduler, cost, blocks,
                              replicas=cfg.run.replicas, router=cfg.run.router, meta=meta,
                              fast_forward=not args.step_by_step, record_steps=args.step_table,
                              progress=bar.update, keep_on_interrupt=True)
        summaries[policy] = {**result.summary(cfg.run.slo),
                             "stability": stability(result)["verdict"]}  # in meta.json too
        interrupted = result.meta["interrupted"]
        print(f"[{policy}] {summaries[policy]['completed']:.0f}/{len(workload)} requests, "
              f"{summaries[policy]['num_steps']} steps simulated in "
              f"{time.perf_counter() - t0:.2f} s" + (" (interrupted)" if interrupted else ""),
              file=sys.stderr)
        if writer:
            writer.add(policy, result, summaries[policy])
        if interrupted:
            break  # Ctrl-C: keep what was simulated, run no further policy
    if args.format == "json":
        print(to_json(summaries))
    else:
        print(f"workload: {workload.describe()}")
        print(f"model {meta['model']} on {cfg.hardware.tensor_parallel} x {meta['hardware']}, "
              f"{blocks} KV blocks of {cfg.scheduler.block_size} tokens, "
              f"{cfg.scheduler.max_num_seqs} seats, {cfg.run.replicas} replica(s)\n")
        print(comparison_table(summaries))
        print("runs: " + "; ".join(f"{p}: {s['stability']}" for p, s in summaries.items()))
        if cfg.run.slo is not None:
            print(slo_line(cfg.run.slo))
        if writer:
            print(f"\nresults written to {writer.dir}/")
    return 130 if interrupted else 0
