"""`batchlab calibrate --from-served FILE|DIR ...`: the served-engine terms fitted on served
benchmark results (calibration/served_bench/fit.py), judged with configurations left out.

Sources: the shared table's CSV (../shared/served-benchmarks/vllm_train.csv) and `vllm bench
serve --save-result` JSON files, one a run (a folder: its .json files), whose GPU, TP degree
and precision the command line gives (calibration/served_bench/bench_serve.py)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from batchlab.calibration.served_bench.bench_serve import ServeSetting, read_bench_serve
from batchlab.calibration.served_bench.read import in_regime, read_benchmarks, set_apart_line
from batchlab.core.model.presets import lookup_model
from batchlab.experiments.errors import UserError
from batchlab.experiments.output import print_calibrated


def add_served_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("from served benchmarks (--from-served; docs/calibration.md)")
    g.add_argument("--from-served", nargs="+", action="extend", metavar="FILE|DIR",
                   help="fit the served engine's constants (CUDA graphs, its all-reduce, fused kernels, GEMM "
                   "rates by weight format, host time) on served benchmarks: a table as "
                   "../shared/served-benchmarks/vllm_train.csv, or vllm bench serve --save-result JSON files "
                   "(one a run at --max-concurrency N --request-rate inf; a folder: its .json files)")
    g.add_argument("--leave-out", default="model,tp", metavar="AXES",
                   help="with --from-served: judge fits that leave out each value of these (model, tp, "
                   "concurrency; default model,tp; none: no held-out fits)")
    g.add_argument("--tensor-parallel", type=int, metavar="N",
                   help="with --from-served JSON: the TP degree the runs served at (vllm bench serve's results "
                   "do not name it, nor the GPU: give --gpu too)")
    g.add_argument("--precision", choices=("bf16", "fp8", "fp4"), metavar="P",
                   help="with --from-served JSON: the weights as served, bf16 | fp8 | fp4 (default: the "
                   "checkpoint's own); --model names the preset where model_id is not one batchlab knows")


def _rows(args: argparse.Namespace) -> list:
    paths = [Path(p) for p in args.from_served]
    tables = [p for p in paths if p.suffix == ".csv"]
    runs = [p for p in paths if p.suffix != ".csv"]
    rows = [r for t in tables for r in read_benchmarks(t)]
    if not runs:
        given = [f for f, v in (("--tensor-parallel", args.tensor_parallel), ("--precision", args.precision)) if v]
        if given:
            raise UserError(f"{given[0]} applies to vllm bench serve JSON files only (a table names its own)")
        return rows
    if not args.gpu or not args.tensor_parallel:
        raise UserError("--from-served JSON: vllm bench serve's results do not name the GPU or the TP degree: "
                        "give --gpu PRESET and --tensor-parallel N")
    if args.tensor_parallel < 1 or args.tensor_parallel > 64:
        raise UserError(f"--tensor-parallel {args.tensor_parallel}: expected 1 to 64")
    if args.model:
        try:
            lookup_model(args.model)
        except ValueError as e:
            raise UserError(f"--model: {e}") from None
    setting = ServeSetting(args.gpu, args.tensor_parallel, args.precision or "", args.model)
    return rows + read_bench_serve(runs, setting)


def run_from_served(args: argparse.Namespace) -> int:
    """The fit on every source's rows, judged with rows left out by --leave-out."""
    from batchlab.calibration.served_bench.fit import LEAVE_OUT, fit, leave_out  # lazy: scipy
    from batchlab.calibration.served_bench.report import served_report  # lazy: scipy (through fit)
    from batchlab.experiments.validation.served_benchmarks import (below_floor_line, floors,  # lazy: the simulator
                                                                   recorded_rows)

    axes = [] if args.leave_out == "none" else [a.strip() for a in args.leave_out.split(",") if a.strip()]
    bad = [a for a in axes if a not in LEAVE_OUT]
    if bad:
        raise UserError(f"--leave-out {bad[0]!r}: expected some of {', '.join(LEAVE_OUT)} (comma-separated) or none")
    out = Path(args.out or "served-vllm.json")
    if not out.parent.is_dir() or out.is_dir():
        raise UserError(f"--out {out}: give a file in an existing directory")
    source = args.from_served[0] if len(args.from_served) == 1 else f"{len(args.from_served)} sources"
    try:
        rows, apart = in_regime(_rows(args))
    except ValueError as e:
        raise UserError(str(e)) from None
    try:
        recs, prices = recorded_rows(rows, progress=not args.no_progress and sys.stderr.isatty())
        result = fit(recs, prices)
    except ValueError as e:
        raise UserError(f"--from-served {source}: {e}") from None
    held = [h for axis in axes for h in leave_out(recs, prices, axis)]
    ran_less = below_floor_line([f for f in floors(rows) if f.below], "fitted all the same, they pull every "
                                "term toward fast")
    calibrated = served_report(result, held, Path(source), set_apart_line(apart), ran_less)
    calibrated.profile.save(out)
    print_calibrated(args, calibrated, out)
    return 0
