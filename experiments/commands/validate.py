"""`batchlab validate`: run a workload on the real backend, then in the simulator with a
calibrated profile on the identical request list (same scheduler settings, the real
run's KV pool), and report how far apart they are: latency statistics and throughput
with their relative errors, step counts, where the schedules diverge, per-step duration
error, preemptions, and the real run's time outside forward passes."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from batchlab.experiments.errors import UserError, warn
from batchlab.experiments.options import (add_backend_options, add_common_options, load_experiment, named,
                                          reject_unused, reject_unused_tables)
from batchlab.experiments.output import check_out_dir, to_json
from batchlab.experiments.replay.options import add_target_options


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("validate", help="run a workload for real and simulated, report the error",
                              description=__doc__)
    add_common_options(p)  # --profile among them; without one, validate calibrates first
    g = add_backend_options(p, threads_note="; the profile should be measured with the same")
    g.add_argument("--repeats", type=int, default=1, metavar="N",
                   help="serve the real side N times: real-vs-real spread, KS and TOST tests, "
                        "what this hardware cannot decide (default 1)")
    add_target_options(p, required=False)  # --endpoint: replay against a server instead
    p.add_argument("--served-model-name", metavar="NAME",
                   help="with --endpoint: the model name the server serves (default: its first)")
    p.add_argument("--real", nargs="+", metavar="DIR",
                   help="serve nothing: judge --profile on the real runs earlier `validate --out` "
                        "directories stored (the fidelity study's cells/WORKLOAD too), simulated again")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.real:
        return rejudge_stored(args)
    from batchlab.core.specs import MODELS
    from batchlab.core.workload import build_workload
    from batchlab.experiments.setup import RUN_EXPERIMENT, load_runtime  # the defaults of `batchlab run`
    from batchlab.experiments.validation import endpoint, profile_source
    from batchlab.experiments.validation.text import render
    from batchlab.experiments.validation.validate import validate

    no_slo = "it compares latencies, not goodput"
    reject_unused(args, "validate", {"hw_name": "it serves on this machine's device (--device)",
                   "hw_tensor_parallel": "the backend runs on one device",
                   "ru_router": "it serves one replica",
                                     "slo_ttft_ms": no_slo, "slo_tpot_ms": no_slo, "slo_e2el_ms": no_slo})
    if args.repeats < 1:
        raise UserError(f"--repeats must be a whole number >= 1, got {args.repeats}")
    cfg = load_experiment(args, RUN_EXPERIMENT)
    reject_unused_tables(cfg, "validate", {"hardware": "it serves on this machine's device (--device)"})
    if cfg.run.replicas != 1:
        raise UserError(f"validate serves one replica; got replicas={cfg.run.replicas}")
    workload = build_workload(cfg.workload)
    if not len(workload):
        raise UserError("the workload has no requests")
    if args.out:
        check_out_dir(args.out)  # before the model loads
    # A bad profile fails before the model loads (for a preset, whose shape is known).
    path = cfg.profile.path  # --profile or the config's [profile] path
    if not args.endpoint and (args.api_key or args.served_model_name):
        raise UserError("--api-key and --served-model-name apply with --endpoint only")
    if args.endpoint:
        if args.repeats != 1:
            raise UserError("--repeats does not apply with --endpoint (one replay per validation)")
        endpoint.check_args(args, path)
        profile = profile_source.load(path)
        return endpoint.validate_endpoint(args, cfg, workload, profile, profile_source.describe(path, profile))
    if path:
        profile = profile_source.load(path)
        if not named(args, "model"):
            cfg.model.name = profile.model_source or profile.model.name  # the profile's model
        if cfg.model.name in MODELS:
            profile_source.check_model(profile, MODELS[cfg.model.name], cfg.model.name)
    t0 = time.perf_counter()
    rt = load_runtime(cfg)
    print(f"model {rt.model.name} loaded in {time.perf_counter() - t0:.1f} s "
          f"({rt.threads} thread(s), {rt.device})", file=sys.stderr)
    # Before a calibration (minutes, without --profile) and before --out is written.
    schedulers = cfg.schedulers(rt.spec.max_context)
    for sched in schedulers.values():  # the KV pool: refused now, before --out is written
        rt.pool_blocks(sched.num_kv_blocks, sched.block_size)
    writer = None
    if args.out:
        from batchlab.experiments.validation.output import ValidationWriter  # matplotlib only with --out
        writer = ValidationWriter(args.out, cfg.record(("hardware",)))
    profile, info = profile_source.resolve(path, rt, Path(args.out) if args.out else None)
    cost = profile.cost_model()
    comps = {}
    for policy, sched in schedulers.items():
        v = validate(rt, workload, sched, cost, seed=cfg.workload.seed,
                     progress=not args.no_progress and sys.stderr.isatty(), profile=info,
                     repeats=args.repeats, loop=profile.loop_overhead())
        if any(r.result.meta.interrupted for r in v.reals):
            raise KeyboardInterrupt  # a partial real run has nothing to compare with
        comps[policy] = v.comparison()
        if writer:
            writer.add(v, comps[policy])
        if args.format == "table":
            print(render(comps[policy]) + "\n")
    if args.format == "json":
        print(to_json(comps))
    elif writer:
        print(f"results written to {writer.dir}/")
    return 0


# What --real may be given: the rest is what the stored runs say they served, on what.
WITH_REAL = {"real", "pr_path", "format", "out", "no_progress", "func", "command"}


def check_stored(cells: list, profile, where: str) -> None:
    """The stored runs served the profile's model (else an error); another device, thread
    count or dtype is a warning, as validate warns."""
    from batchlab.calibration.from_run import model_mismatch, setting_mismatches

    warned = set()
    for c in cells:
        for r in c.reals:
            wrong = model_mismatch(r, profile, where)
            if wrong:
                raise UserError(wrong)
            for why in (w.split(": ", 1)[-1] for w in setting_mismatches(r, profile, where)):
                if why not in warned:
                    warned.add(why)
                    warn(f"{r.where} (and any other like it): {why}")


def rejudge_stored(args: argparse.Namespace) -> int:
    """validate --real: the profile judged on stored real runs (experiments/validation/rejudge.py)."""
    from batchlab.experiments.validation import profile_source, rejudge, stored
    from batchlab.experiments.validation.per_step import describe as describe_per_step

    parser = argparse.ArgumentParser()  # validate's own options, for their defaults and flags
    subparsers = parser.add_subparsers(dest="command")
    add_parser(subparsers)
    defaults = vars(parser.parse_args(["validate"]))
    flag = {a.dest: a.option_strings[0] for a in subparsers.choices["validate"]._actions if a.option_strings}
    given = sorted(flag.get(k, k) for k, v in vars(args).items() if k not in WITH_REAL and v != defaults.get(k))
    if given:
        raise UserError(f"{', '.join(given)}: not with --real (the stored runs say what was served, "
                        f"on what); --real takes --profile, --out and --format")
    if not args.pr_path:
        raise UserError("--real needs --profile FILE|NAME: the profile to judge on the stored runs")
    if args.out:
        check_out_dir(args.out)
    profile = profile_source.load(args.pr_path)  # a broken profile is the cheaper error to report
    cells = [c for d in args.real for c in stored.read_cells(d)]
    check_stored(cells, profile, args.pr_path)
    cost, loop = profile.cost_model(), profile.loop_overhead()
    speeds = rejudge.run_speeds(cells, cost, profile.describe())
    judged = [rejudge.rejudge(c, cost, loop, s) for c, s in zip(cells, speeds)]
    result = {"profile": profile_source.describe(args.pr_path, profile), "cells": judged,
              "totals": rejudge.totals(judged), "per_step": rejudge.step_test(cells, cost, speeds)}
    if args.format == "json":
        print(to_json(result))
    else:
        for c in judged:
            print(rejudge.render_cell(c) + "\n")
        print(rejudge.render_totals(result["totals"], len(judged), len(args.real)))
        print(describe_per_step(result["per_step"]))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "rejudged.json").write_text(to_json(result) + "\n")
        print(f"results written to {out}/rejudged.json", file=sys.stderr)
    return 0
