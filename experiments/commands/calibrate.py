"""`batchlab calibrate`: time the torch backend over a grid of step shapes, fit the
simulator's cost model to it and save a profile (`batchlab simulate --profile FILE`).

Raw timings go to a JSONL next to the profile as they are taken: an interrupted sweep
keeps them, and the same command run again resumes where it stopped."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from batchlab.calibration.operators.tables import OperatorTableError
from batchlab.calibration.sweep.grid import default_grid, tiny_grid
from batchlab.calibration.sweep.on_contention import ON_CONTENTION, ON_CONTENTION_ENV
from batchlab.calibration.sweep.runner import measurements_path
from batchlab.core.checks import MAX_BLOCK_SIZE, parse_memory
from batchlab.core.model.hardware import HARDWARE
from batchlab.experiments.calibrate.from_served import add_served_options, run_from_served
from batchlab.experiments.calibrate.replay_options import add_options
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.fast_options import FastChoice, add_fast_path_options
from batchlab.experiments.output import print_calibrated, profile_out_path, save_fitted_profile

GRIDS = ("default", "quick")
# Modules only one of this command's paths needs (torch for a sweep, scipy for the fits,
# httpx for --endpoint) load inside it, with the reason on the line.


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("calibrate", help="time the backend, fit the cost model, save a profile",
                              description=__doc__)
    p.add_argument("--model", metavar="NAME|DIR",
                   help="backend model: a batchlab-* size or a checkpoint dir (default batchlab-small); "
                   "with --from-replay: the model the replays must be of")
    p.add_argument("--device", default="cpu", metavar="DEV", help="cpu (default) | cuda | cuda:N")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="torch threads (default 1: steady timing on small shared CPUs)")
    p.add_argument("--dtype", default="float32", metavar="DTYPE", help="float32 (default) | bfloat16 | float16")
    add_fast_path_options(p, prefix="")
    p.add_argument("--out", metavar="FILE", help="profile JSON (default MODEL-DEVICE.json); raw "
                   "timings go to the .jsonl next to it")
    p.add_argument("--grid", choices=GRIDS, default="default",
                   help="default: ~3-5 min on one CPU thread; quick: a smoke test (not for use)")
    p.add_argument("--block-size", type=int, metavar="N", help="KV block size (default 16)")
    p.add_argument("--kv-memory", metavar="BUDGET",
                   help="KV pool the profile's capacity is for (default: the backend's, 1GiB on cpu)")
    p.add_argument("--points", action="store_true", help="also print every grid point's error")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="json: fit quality and effective rates on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--on-contention", choices=ON_CONTENTION, default=None,
                   help="when the serving phase is contended twice (other work took the CPU): refuse "
                        f"(default; ${ON_CONTENTION_ENV} sets another) and write nothing, or keep it, warning")
    p.add_argument("--from-run", nargs="+", action="extend", metavar="DIR",  # repeated: all of them
                   help="fit from served runs instead of sweeping: the --out directories of "
                   "batchlab run / validate (see docs/calibration.md)")
    p.add_argument("--profile", metavar="FILE|NAME",
                   help="with --from-run: refine this profile to serving (default: fit every term); "
                   "with --from-replay / --endpoint: the prior (default: the model's shipped profile)")
    p.add_argument("--holdout-every", type=int, default=3, metavar="K",
                   help="with --from-run / --from-replay: judge on 1 in K runs, not fitted on (a single "
                   "run: its last quarter); 0: fit on all (default 3)")
    add_options(p)
    p.add_argument("--from-operators", metavar="DIR|PROFILE",
                   help="fit a GPU profile on operator tables in Vidur's layout (DIR/compute/GPU/"
                   "ORG/MODEL/mlp.csv, DIR/attention, DIR/network), e.g. ../shared/gpu-profiles/vidur; "
                   "or refine --gpu's profile on the steps of a batchlab profile made with --device cuda")
    p.add_argument("--gpu", metavar="PRESET", help="with --from-operators: the hardware preset to fit "
                   "(a100-80gb | h100-sxm | a40); with --from-served JSON: the GPU the runs served on")
    add_served_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    fitted = next((f for f, on in (("--from-served", args.from_served), ("--from-operators", args.from_operators),
                                   ("--from-run", args.from_run), ("--from-replay", args.from_replay),
                                   ("--endpoint", args.endpoint)) if on), None)
    fast = [d for d in ("attention", "fused", "cuda_graphs", "one_row_decode") if getattr(args, d) is not None]
    if fitted and fast:  # these fit timings already taken: no backend runs to take a path
        raise UserError(f"--{fast[0].replace('_', '-')} (the backend's fast path) applies to a sweep, "
                        f"not with {fitted}")
    if args.from_served:
        return run_from_served(args)
    if args.tensor_parallel or args.precision:
        raise UserError(f"--{'tensor-parallel' if args.tensor_parallel else 'precision'} applies to --from-served only")
    if args.from_operators:
        return run_from_operators(args)
    if args.gpu:
        raise UserError("--gpu applies to --from-operators only")
    if args.from_run:
        return run_from_runs(args)
    if args.from_replay or args.endpoint:
        return run_from_timings(args)
    if args.block_size is None:
        args.block_size = 16
    if args.model is None:
        args.model = "batchlab-small"
    if args.profile:
        raise UserError("--profile applies to --from-run only (a sweep fits a profile afresh)")
    choice = FastChoice(args.attention or "gather", bool(args.fused), bool(args.cuda_graphs), bool(args.one_row_decode))
    choice.check(args.device, table=None)  # a bad choice fails before torch loads
    from batchlab.calibration.sweep.report import swept  # lazy: profile model
    try:
        from batchlab.calibration.sweep.run import calibrate  # lazy: torch (an optional dependency)
    except ImportError as e:  # torch is an optional dependency
        raise UserError(f"calibration needs the backend: torch and transformers ({e}); "
                        "install batchlab[backend]") from None
    fast = choice.fast_path()
    if not 1 <= args.threads <= 4096:
        raise UserError(f"--threads must be from 1 to 4096, got {args.threads}")
    if not 1 <= args.block_size <= MAX_BLOCK_SIZE:
        raise UserError(f"--block-size must be from 1 to {MAX_BLOCK_SIZE:,} tokens, got {args.block_size}")
    if args.kv_memory is not None:
        try:
            parse_memory(args.kv_memory)
        except ValueError as e:
            raise UserError(f"--kv-memory: {e}") from None
    out = profile_out_path(args)
    grid = default_grid() if args.grid == "default" else tiny_grid()
    try:
        profile = calibrate(args.model, args.device, args.threads, out, grid, dtype=args.dtype,
                            block_size=args.block_size, kv_memory=args.kv_memory,
                            progress=not args.no_progress and sys.stderr.isatty(),
                            on_contention=args.on_contention, fast=fast)
    except KeyboardInterrupt:
        kept = measurements_path(out)
        if kept.is_file() and kept.stat().st_size:
            print(f"batchlab: interrupted; timings so far are kept in {kept}: "
                  f"run the same command again to resume", file=sys.stderr)
        else:  # stopped before its first timing: name no file that is not there
            print("batchlab: interrupted before any timing was taken; nothing was written",
                  file=sys.stderr)
        return 130
    except (OSError, RuntimeError) as e:  # a checkpoint transformers cannot read, a full disk
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"calibration of {args.model!r} failed: {first}") from None
    print_calibrated(args, swept(profile, out, points=args.points), out)
    return 0


def run_from_runs(args: argparse.Namespace) -> int:
    """--from-run DIR [DIR ...]: fit (or, with --profile, refine) the cost model on served
    runs' step tables and print its error per step kind on the runs it was not fitted on
    (calibration/served/from_run.py)."""
    from batchlab.calibration.served.from_run import from_runs  # lazy: scipy
    from batchlab.calibration.served.report import from_runs_report  # lazy: scipy (through from_run)
    from batchlab.core.cost.profile import load_profile, ProfileError  # lazy: profile model

    if args.holdout_every < 0 or args.holdout_every == 1:
        raise UserError(f"--holdout-every must be 0 (none) or >= 2, got {args.holdout_every}")
    out = profile_out_path(args) if args.out else None  # checked before any work
    profile = None
    if args.profile:
        try:
            profile = load_profile(args.profile)
        except ProfileError as e:
            raise UserError(str(e)) from None
    try:
        result = from_runs(args.from_run, profile, str(args.profile or ""), args.holdout_every)
    except ValueError as e:
        raise UserError(str(e)) from None
    out = save_fitted_profile(args, out, result.profile, "served")
    print_calibrated(args, from_runs_report(result), out)
    return 0


def run_from_operators(args: argparse.Namespace) -> int:
    """--from-operators DIR --gpu PRESET: a GPU profile (calibration/operators/)."""
    from batchlab.calibration.operators.build import build_profile  # lazy: scipy
    from batchlab.calibration.operators.report import built_report  # lazy: scipy (through build)

    if not args.gpu:
        raise UserError("--from-operators needs --gpu PRESET (a100-80gb | h100-sxm | a40)")
    root = Path(args.from_operators)
    out = Path(args.out or f"{args.gpu}.json")
    if not out.parent.is_dir() or out.is_dir():
        raise UserError(f"--out {out}: give a file in an existing directory")
    if root.is_file():  # batchlab's own steps on a GPU: refine the GPU's public-data profile
        return refine_from_steps(args, root, out)
    if not root.is_dir():
        raise UserError(f"--from-operators {root}: not a directory of operator tables or a "
                        f"batchlab profile (calibrate --device cuda)")
    try:
        built = build_profile(root, args.gpu)
    except OperatorTableError as e:
        raise UserError(str(e)) from None
    built.profile.save(out)
    print_calibrated(args, built_report(built), out)
    return 0


def refine_from_steps(args: argparse.Namespace, path: Path, out: Path) -> int:
    """--from-operators PROFILE.json: the steps `calibrate --device cuda` measured refit the
    GPU profile of --gpu (calibration/operators/from_steps.py)."""
    from batchlab.calibration.operators.from_steps import refine_on_steps  # lazy: scipy
    from batchlab.calibration.operators.report import refined_report  # lazy: scipy (through build)
    from batchlab.experiments.setup.gpu import gpu_profile_for  # lazy: the GPU profiles, for --from-operators only

    if args.gpu not in HARDWARE:
        raise UserError(f"unknown GPU {args.gpu!r} (--gpu): expected one of {', '.join(HARDWARE)}")
    base, where = gpu_profile_for(ExperimentConfig.model_validate({"hardware": {"name": args.gpu}}))
    try:
        refined = refine_on_steps(path, base)
    except OperatorTableError as e:
        raise UserError(str(e)) from None
    refined.profile.save(out)
    print_calibrated(args, refined_report(refined, where), out)
    return 0


def run_from_timings(args: argparse.Namespace) -> int:
    """--from-replay PATH ... or --endpoint URL: fit request timings
    (experiments/calibrate/from_replay.py, endpoint.py)."""
    if args.from_replay and args.endpoint:
        raise UserError("give --from-replay or --endpoint, not both")
    if args.endpoint:
        from batchlab.experiments.calibrate.endpoint import run_endpoint  # lazy: httpx, scipy
        return run_endpoint(args)
    from batchlab.experiments.calibrate.from_replay import run_from_replay  # lazy: scipy
    return run_from_replay(args)
