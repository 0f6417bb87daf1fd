"""`batchlab validate`: judge a calibrated profile on real runs of a workload. The real
runs come from one of three sources: served here on the backend (the default; --repeats N
serves each policy N times; with --prefill-replicas 1 --decode-replicas 1, as a prefill
and a decode engine, simulated as that deployment), a replay against a server (--endpoint
URL), or runs earlier validations stored (--real DIR ...). The simulator runs the identical request list under
the same scheduler settings and the real runs' KV pool with the profile (the headline)
and at each real run's measured machine speed (normalised); every judged latency and
throughput number gets its error and verdict, followed by the diagnostics the source
allows (experiments/validation/judge.py)."""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

from batchlab.calibration.served_bench.client import CLIENTS, DEFAULT_CLIENT
from batchlab.calibration.served_bench.judge import sides_the_rows_fix
from batchlab.calibration.served_bench.read import in_regime, read_benchmarks, set_apart_line
from batchlab.core import atomic
from batchlab.core.model.presets import MODELS
from batchlab.core.workload import build_workload
from batchlab.experiments.disaggregation.options import add_deployment_options
from batchlab.experiments.errors import UserError
from batchlab.experiments.limits import check_samples
from batchlab.experiments.kv_tier_options import add_kv_tier_options, check_backend_tier
from batchlab.experiments.options import (add_backend_options, add_common_options, load_experiment, named,
                                          reject_unused, reject_unused_tables)
from batchlab.experiments.output import check_out_dir, to_json
from batchlab.experiments.replay.options import add_target_options
from batchlab.experiments.setup import RUN_EXPERIMENT, load_runtime  # RUN_EXPERIMENT: `batchlab run`'s defaults
from batchlab.experiments.setup.served import served_profile_of
from batchlab.experiments.validation import load_curves, pools, profile_source, render, served_benchmarks
from batchlab.experiments.validation.judge import Judge
from batchlab.experiments.validation.output import ValidationWriter, write_endpoint
from batchlab.experiments.validation.sources import SERVED_HERE, serve_here
from batchlab.experiments.speculative_options import add_speculative_options, check_run_speculative


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("validate", help="run a workload for real and simulated, report the error",
                              description=__doc__)
    add_common_options(p)  # --profile among them; without one, validate calibrates first
    add_speculative_options(p)
    g = add_backend_options(p, threads_note="; the profile should be measured with the same")
    g.add_argument("--repeats", type=int, default=1, metavar="N",
                   help="serve (or with --endpoint replay) the real side N times: real-vs-real "
                        "spread, KS and TOST tests, what this hardware cannot decide (default 1)")
    add_target_options(p, required=False)  # --endpoint: replay against a server instead
    add_kv_tier_options(p)
    add_deployment_options(p)  # [deployment]: served as a prefill and a decode engine (validation/pools.py)
    p.add_argument("--served-model-name", metavar="NAME",
                   help="with --endpoint: the model name the server serves (default: its first)")
    p.add_argument("--served-benchmarks", metavar="FILE",
                   help="serve nothing: judge the default prediction on a served-engine benchmark table "
                   "(mean TTFT/TPOT per configuration, as ../shared/served-benchmarks/vllm_train.csv)")
    p.add_argument("--client", choices=CLIENTS,
                   help="with --served-benchmarks: how the benchmark's users were phased (default perturbed: all at "
                   "once, lengths within 0.5%% of the row's; calibration/served_bench/client.py)")
    p.add_argument("--rows", action="store_true", help="with --served-benchmarks: every configuration's figures")
    p.add_argument("--held-out", action="store_true",
                   help="with --served-benchmarks: price each row by the served profile's fold fitted without its "
                   "model (calibrate --from-served --leave-out model): the judgement on models not fitted")
    p.add_argument("--served-engine", metavar="vllm|none|FILE",
                   help="with --served-benchmarks: the served-engine terms on the GPU profiles: vllm (default: "
                   "the shipped ones), none (the kernels' sum), or a served profile (calibrate --from-served)")
    p.add_argument("--real", nargs="+", metavar="DIR",
                   help="serve nothing: judge --profile on the real runs earlier `validate --out` "
                        "directories stored (the fidelity study's cells/WORKLOAD too), simulated again")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.served_benchmarks:
        return judge_served_benchmarks(args)
    for flag, given in (("--served-engine", args.served_engine), ("--client", args.client), ("--rows", args.rows),
                        ("--held-out", args.held_out)):
        if given:
            raise UserError(f"{flag} applies with --served-benchmarks")
    if args.real:
        return judge_stored(args)
    no_slo = "it compares latencies, not goodput"
    reject_unused(args, "validate", {"hw_name": "it serves on this machine's device (--device)",
                                     "hw_tensor_parallel": "the backend runs on one device",
                                     "ru_router": "it serves one replica",
                                     "slo_ttft_ms": no_slo, "slo_tpot_ms": no_slo, "slo_e2el_ms": no_slo})
    if args.repeats < 1:
        raise UserError(f"--repeats must be a whole number >= 1, got {args.repeats}")
    check_samples(f"--repeats {args.repeats}", args.repeats)  # each one a real run
    cfg = load_experiment(args, RUN_EXPERIMENT)
    reject_unused_tables(cfg, "validate", {"hardware": "it serves on this machine's device (--device)"})
    if cfg.run.replicas != 1:
        raise UserError(f"validate serves one replica; got replicas={cfg.run.replicas}")
    check_run_speculative(cfg, None)
    if cfg.deployment is not None:
        if args.endpoint:
            raise UserError("[deployment] applies to a workload served here, not with --endpoint")
        pools.check_deployment(cfg)
    workload = build_workload(cfg.workload)
    if not len(workload):
        raise UserError("the workload has no requests")
    if args.out:
        check_out_dir(args.out)  # before the model loads
    # A bad profile fails before the model loads (for a preset, whose shape is known).
    path = cfg.profile.path  # --profile or the config's [profile] path
    if not args.endpoint and (args.api_key or args.served_model_name):
        raise UserError("--api-key and --served-model-name apply with --endpoint only")
    if cfg.kv_tier and args.endpoint:
        raise UserError("[kv_tier] applies to a workload served here, not with --endpoint")
    check_backend_tier(cfg.kv_tier, priced=True)  # validate always has a profile's price
    if args.endpoint:
        from batchlab.experiments.validation import endpoint  # lazy: httpx, only with --endpoint
        endpoint.check_args(args, path)
        return judge_endpoint(args, cfg, workload, profile_source.load(path), path)
    if path:
        profile = profile_source.load(path)
        if not named(args, "model"):
            cfg.model.name = profile.model_source or profile.model.name  # the profile's model
        if cfg.model.name in MODELS:
            profile_source.check_model(profile, MODELS[cfg.model.name], cfg.model.name)
    return judge_served(args, cfg, workload, path)


def judge_served(args: argparse.Namespace, cfg, workload, path: str | None) -> int:
    """Serve each policy here (--repeats times), judge the profile on the runs."""
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
        writer = ValidationWriter(args.out, cfg.record(("hardware",)))
    profile, info = profile_source.resolve(path, rt, Path(args.out) if args.out else None)
    judge = Judge.of(profile, info)
    table = args.format == "table"
    if table:
        print(render.fit(render.profile_line(info)) + "\n")
    link = None
    if cfg.deployment is not None:
        block = next(iter(schedulers.values())).block_size
        link = pools.copy_link(profile, rt, block, cfg.deployment.link_latency_us)
    if table and link is not None:
        print(render.fit(f"served as 1 prefill + 1 decode engine in one process, each step timed, each pool on a "
                         f"timeline of its own; the KV hand-off is an {link.name} priced at "
                         f"{link.latency_s * 1e6:.0f} us a hand-off + its bytes at {link.bandwidth / 1e9:.3g} GB/s "
                         f"({link.source})") + "\n")
    judged = []
    for sched in schedulers.values():
        where = str(writer.dir / sched.policy) if writer else SERVED_HERE
        if link is not None:
            side = pools.serve_pools_here(rt, workload, sched, judge.cost, info.describe,
                                          rt.pool_blocks(sched.num_kv_blocks, sched.block_size), link,
                                          repeats=args.repeats, seed=cfg.workload.seed, where=where)
        else:
            side = serve_here(rt, workload, sched, judge.cost, info.describe, repeats=args.repeats,
                              seed=cfg.workload.seed, progress=not args.no_progress and sys.stderr.isatty(),
                              where=where, kv_tier=cfg.kv_tier, speculative=cfg.speculative)
        judged.append(judge.cell(side, info.as_dict()))
        if writer:
            writer.add(judged[-1], judge.report(judged))
            writer.draw(judged[-1])
        if table:
            print(render.render_cell(judged[-1].cell) + "\n")
    judgement = judge.report(judged)
    if table:
        n = len(judged)
        print(render.render_end(judgement, f"{n} polic{'y' if n == 1 else 'ies'} "
                                           + ("served here" if not writer else f"in {writer.dir}")))
    else:
        print(to_json(judgement.as_dict()))
    if writer:
        print(f"results written to {writer.dir}/", file=sys.stderr)
    return 0


def judge_endpoint(args: argparse.Namespace, cfg, workload, profile, path: str) -> int:
    """Replay against --endpoint once, judge the profile on the replay."""
    from batchlab.experiments.validation import endpoint  # lazy: httpx, only with --endpoint

    info = profile_source.describe(path, profile)
    judge = Judge.of(profile, info)
    side, failures = endpoint.replay_side(args, cfg, workload, profile)
    judged = judge.cell(side, info.as_dict())
    judgement = judge.report([judged])
    if args.out:
        write_endpoint(args.out, cfg.model_dump(), judged, judgement)
    if args.format == "json":
        print(to_json(judgement.as_dict()))
    else:
        print("\n\n".join([render.fit(render.profile_line(info)), render.render_cell(judged.cell),
                           render.render_end(judgement, f"1 policy replayed at {side.where}")]))
        if args.out:
            print(f"results written to {args.out}/", file=sys.stderr)
    return 1 if failures else 0


# What --real may be given: the rest is what the stored runs say they served, on what.
WITH_REAL = {"real", "pr_path", "format", "out", "no_progress", "func", "command"}


def judge_stored(args: argparse.Namespace) -> int:
    """validate --real: the profile judged on stored real runs, without serving again."""
    from batchlab.experiments.validation import stored  # lazy: scipy.optimize (calibration), only with --real

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
    stored.check_profile(cells, profile, args.pr_path)
    judge = Judge.of(profile, profile_source.describe(args.pr_path, profile))
    judgement = judge.report([judge.cell(c, {}) for c in cells], stored.same_work_apart(cells))
    text = to_json(judgement.as_dict())
    print(text if args.format == "json" else render.render_stored(judgement, len(args.real)))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        atomic.write_text(out / "rejudged.json", text + "\n")
        print(f"results written to {out}/rejudged.json", file=sys.stderr)
    return 0


def judge_served_benchmarks(args: argparse.Namespace) -> int:
    """--served-benchmarks FILE (experiments/validation/served_benchmarks.py)."""
    if args.real or args.endpoint:
        raise UserError("--served-benchmarks judges a table: give it without --real or --endpoint")
    served, client = args.served_engine or "vllm", args.client or DEFAULT_CLIENT
    try:
        rows, apart = in_regime(read_benchmarks(args.served_benchmarks))
    except ValueError as e:
        raise UserError(str(e)) from None
    profile, _ = served_profile_of(served)  # a bad file: one line before any row runs
    if args.out:
        check_out_dir(args.out)
    if args.held_out and profile is None:
        raise UserError("--held-out prices each row by a served profile's fold: not with --served-engine none")
    progress = not args.no_progress and sys.stderr.isatty()
    with tempfile.TemporaryDirectory() as folds:
        try:
            by_model = (served_benchmarks.fold_profiles(profile, {r.model for r in rows}, Path(folds))
                        if args.held_out else None)
        except ValueError as e:
            raise UserError(f"--held-out: {e}") from None
        judgement = served_benchmarks.judge_rows(rows, client, progress=progress, served=served, by_model=by_model)
    below = [f for f in served_benchmarks.floors(rows, served) if f.below]
    if args.format == "json":
        fixed = sides_the_rows_fix(judgement, {f.row for f in below})
        print(to_json({**dataclasses.asdict(judgement), "below_floor": [dataclasses.asdict(f) for f in below],
                       "one_sided_whatever_the_price": [{"group": g.group, "why": why} for g, why in fixed]}))
    else:
        by = {"vllm": "the shipped served-engine terms (vLLM)", "none": "the kernels' sum (no served-engine terms)"}
        priced_by = by.get(served, f"the served engine ({served})")
        if args.held_out:
            priced_by = f"each row by the fold of {priced_by} fitted without its model (held out)"
        print(served_benchmarks.render(judgement, client, args.rows, priced_by, set_apart_line(apart), below))
    if args.out:
        title = f"Load curves, {Path(args.served_benchmarks).name}: {'held out by model' if args.held_out else served}"
        try:
            written = load_curves.write(judgement, args.out, title)
        except OSError as e:
            raise UserError(f"--out {args.out}: {e.strerror or e}") from None
        print(f"written: {', '.join(str(p) for p in written)}", file=sys.stderr)
    return 0
