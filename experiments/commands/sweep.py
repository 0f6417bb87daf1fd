"""`batchlab sweep --config GRID.toml --out DIR`: every point of the grid, on all
local cores (or --workers N, or a Dask cluster), streamed to DIR/points.jsonl as each
finishes; rerun the same command to resume. Then DIR/results.csv|parquet (every point,
in grid order), DIR/pareto.csv|parquet and DIR/pareto.png."""
from __future__ import annotations

import argparse
import sys
import math
from pathlib import Path

from batchlab.core import atomic
from batchlab.core.workload import WorkloadConfig
from batchlab.experiments.capacity.options import positive_price
from batchlab.experiments.capacity.tables import text_table, write_rows
from batchlab.experiments.errors import UserError
from batchlab.experiments.executor import add_executor_options, make_executor, run_all
from batchlab.experiments.output import check_out_dir, to_json
from batchlab.experiments.progress import progress_bar
from batchlab.experiments.seed_effect import check_seeds_vary
from batchlab.experiments.setup import sim_setup
from batchlab.experiments.sweep import run as point_runs  # run_point read when called: tests patch it
from batchlab.experiments.sweep.grid import Sweep, load_sweep
from batchlab.experiments.sweep.pareto import PER_GPU, PER_USER, cost_key, pareto, throughput_front, with_rates
from batchlab.experiments.sweep.store import PointStore, restore


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("sweep", help="a grid of simulations or capacity searches, with a Pareto table",
                              description=__doc__)
    p.add_argument("--config", required=True, metavar="GRID.toml",
                   help="an experiment config with a [grid] of value lists and a [sweep] table")
    p.add_argument("--out", required=True, metavar="DIR", help="results stream here; rerun to resume")
    p.add_argument("--gpu-hour-price", type=positive_price, metavar="USD",
                   help="price one GPU-hour (overrides [sweep] gpu_hour_price): Pareto on cost")
    p.add_argument("--format", choices=("table", "json"), default="table")
    add_executor_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    sweep = load_sweep(args.config)
    if args.gpu_hour_price is not None:
        sweep.settings = sweep.settings.model_copy(update={"gpu_hour_price": args.gpu_hour_price})
    assumptions = _check_points(sweep)
    check_out_dir(args.out)
    out = Path(args.out)
    store = PointStore(out)
    todo = [p for p in sweep.points if p.key not in store.done]
    resumed = len(sweep.points) - len(todo)
    where = "nothing to run"
    try:
        if todo:
            with make_executor(args.workers, args.dask) as (ex, where), \
                    progress_bar(total=len(sweep.points), initial=resumed, desc="sweep", unit="point") as bar:
                run_all(ex, point_runs.run_point, [(p, sweep.settings) for p in todo],
                        lambda i, row: (store.add(row), bar.update()))
    except KeyboardInterrupt:
        print(f"batchlab: interrupted; {len(store.done)} of {len(sweep.points)} points are kept in "
              f"{store.path}: run the same command again to resume", file=sys.stderr)
        return 130
    finally:
        store.close()
    rows = [with_rates(restore(store.done[p.key])) for p in sweep.points]
    return _report(args, sweep, rows, out, resumed, where, assumptions)


def _check_points(sweep: Sweep) -> dict[tuple, list[str]]:
    """Every point's presets and settings, before anything runs (a model too large for
    its GPUs is a row saying so, not an error); the distinct assumptions, each with the
    points that make them."""
    assumptions: dict[tuple, list[str]] = {}
    for wl_json in {p.config.workload.model_dump_json(): None for p in sweep.points}:
        try:
            check_seeds_vary(WorkloadConfig.model_validate_json(wl_json), sweep.settings.seeds,
                             "[sweep] windows = W", seeds_option="[sweep] seeds =",
                             jitter_option="[workload] jitter_s = S",
                             resample_option="[workload] resample = \"requests\" | \"windows\"")
        except UserError as e:
            raise UserError(f"{sweep.path}: {e}") from None
    for p in sweep.points:
        try:
            lines = tuple(sim_setup(p.config).assumptions())
            assumptions.setdefault(lines, []).append(str(p.index))
        except UserError as e:
            if "leaves no KV memory" not in str(e):
                values = ", ".join(f"{k}={v!r}" for k, v in p.values.items())
                raise UserError(f"{sweep.path}: grid point {values}: {e}") from None
        if sweep.settings.point != "simulate" and p.config.run.slo is None:
            raise UserError(f"{sweep.path}: [sweep] point = {sweep.settings.point!r} needs an SLO "
                            f"([run.slo] ttft_ms / tpot_ms / e2el_ms)")
    return assumptions


def _report(args, sweep: Sweep, rows: list[dict], out: Path, resumed: int, where: str,
            assumptions: dict[tuple, list[str]]) -> int:
    from batchlab.experiments.sweep.plot import plot_pareto  # lazy: matplotlib, not while parsing (--help)

    s = sweep.settings
    metric = s.pareto_metric or ("answer" if s.point == "max-rate" else "p99_ttft_ms")
    if rows and metric not in rows[0] and not any(metric in r for r in rows):
        raise UserError(f"{sweep.path}: [sweep] pareto_metric {metric!r} is not a result column")
    front = pareto(rows, metric)
    tput = throughput_front(rows)
    files = write_rows(out / "results", rows) + write_rows(out / "pareto", front or [{"point": None}])
    files += write_rows(out / "pareto_throughput", tput or [{"point": None}])
    files.append(plot_pareto(out, rows, front, metric))
    summary = {"points": len(rows), "resumed": resumed, "ran_on": where, "pareto_metric": metric,
               "passing": sum(bool(r.get("passes")) for r in rows),
               "rejected": sum(_count(r, "rejected") for r in rows),
               "unfinished": sum(_count(r, "unfinished") for r in rows), "pareto": front,
               "pareto_throughput": tput}
    atomic.write_text(out / "sweep.json", to_json(summary) + "\n")
    if args.format == "json":
        print(to_json({"results": rows, "pareto": front}))
        return 0
    print(f"sweep {sweep.path}: {len(rows)} points ({s.point}), {resumed} from an earlier run, "
          f"ran on {where}")
    print(f"a point passes with {point_runs.criteria_for(sweep.points[0], s).describe()}")
    for i, (lines, points) in enumerate(assumptions.items()):
        if i == MAX_ASSUMPTION_BLOCKS:
            print(f"... {len(assumptions) - i} more sets: each point's are columns of results.csv")
            break
        if len(assumptions) > 1:
            print(f"[points {_ranges(points)}]")
        print("\n".join(lines))
    x = cost_key(rows)
    cols = [("point", "point", "{}"), *[(f, f, "{}") for f in sweep.fields],
            (x, "$/hour" if x == "cost_per_hour" else "GPUs", "{:.2f}" if x == "cost_per_hour" else "{:.0f}"),
            (metric, metric, "{:.2f}"), ("rejected", "rejected", "{:.0f}"),
            ("unfinished", "unfinished", "{:.0f}"), ("stability", "queue", "{}")]
    met = sum(bool(r.get("passes")) for r in rows)
    lost = [r for r in rows if _count(r, "rejected") or _count(r, "unfinished")]
    print(f"{met} of {len(rows)} points stable and within their criteria; {len(lost)} rejected or "
          f"left unfinished some requests (" + (", ".join(
              f"point {r['point']}: {_count(r, 'rejected')} rejected, {_count(r, 'unfinished')} "
              f"unfinished of {_count(r, 'requests')}" for r in lost[:4]) or "none")
          + (", ..." if len(lost) > 4 else "") + ")")
    print(f"Pareto front ({x} against {metric}), passing points only:")
    print(text_table(front, cols) if front else "  (empty: no point met its criteria)")
    if tput:
        print("\nPareto front of output tokens/s per user against tokens/s per GPU (vLLM's convention), "
              "passing points only:")
        print(text_table(tput, [("point", "point", "{}"), *[(f, f, "{}") for f in sweep.fields],
                                (PER_GPU, "tokens/s per GPU", "{:.0f}"), (PER_USER, "tokens/s per user", "{:.1f}")]))
    print(f"\nresults written to {out}/ ({', '.join(files)})")
    return 0


MAX_ASSUMPTION_BLOCKS = 6


def _count(row: dict, key: str) -> int:
    v = row.get(key)
    return int(v) if isinstance(v, (int, float)) and math.isfinite(v) else 0


def _ranges(points: list[str]) -> str:
    text = ", ".join(points)
    return text if len(text) < 60 else text[:57] + "..."
