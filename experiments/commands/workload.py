"""`batchlab workload stats|convert SOURCE`: inspect a workload, or save it in the
batchlab trace format. SOURCE and the workload options mean what they mean for
simulate and run; a --config TOML contributes its [workload] table."""
from __future__ import annotations

import argparse
import sys

from batchlab.core.workload import WorkloadConfig, build_workload, format_stats, workload_stats, write_trace
from batchlab.experiments.config import build_config, read_toml
from batchlab.experiments.errors import UserError
from batchlab.experiments.options import name_flag
from batchlab.experiments.output import to_json
from batchlab.experiments.workload_options import add_workload_options, workload_overrides
from batchlab.experiments.workload_plot import check_plot_path, plot


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("workload", help="inspect and convert workloads and traces",
                              description=__doc__)
    sub = p.add_subparsers(dest="action", required=True, parser_class=type(p))
    s = sub.add_parser("stats", help="count, span, rate, burstiness, length percentiles",
                       description="Print what a workload looks like, after its transformations.")
    _common(s)
    s.add_argument("--plot", metavar="FILE.png",
                   help="draw arrivals per second over time and the two length histograms")
    s.add_argument("--format", choices=("table", "json"), default="table",
                   help="json: the statistics on stdout")
    s.set_defaults(func=stats)
    c = sub.add_parser("convert", help="write the batchlab trace format (CSV or JSON lines)",
                       description="Write a workload, after its transformations, in the "
                                   "batchlab trace format: arrival_s, prompt_len, output_len "
                                   "[, priority][, prefix_hashes].")
    _common(c)
    c.add_argument("-o", "--output", required=True, metavar="OUT.csv|OUT.jsonl",
                   help="the file to write; the suffix picks CSV or JSON lines")
    c.set_defaults(func=convert)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", nargs="?", metavar="SOURCE",
                   help="a trace file, a shared trace or a synthetic preset (as --workload)")
    p.add_argument("--config", metavar="FILE.toml", help="take the [workload] table of this config")
    add_workload_options(p)


def workload_config(args: argparse.Namespace) -> WorkloadConfig:
    """[workload] of --config (if any), then the command-line options, then SOURCE."""
    if args.source and args.wl_source:  # which one was meant? refuse to guess
        raise UserError(f"the workload is given twice, as SOURCE {args.source!r} and as "
                        f"--workload {args.wl_source!r}; expected one of them")
    data = read_toml(args.config).get("workload", {}) if args.config else {}
    if not isinstance(data, dict):
        raise UserError(f"{args.config}: workload: expected a table")
    data.update(workload_overrides(args))
    if args.source:
        data["source"] = args.source
    try:
        return build_config({"workload": data}, where=args.config or "").workload
    except UserError as e:
        raise UserError(name_flag(str(e), args)) from None


def stats(args: argparse.Namespace) -> int:
    if args.plot:
        check_plot_path(args.plot)  # before the work, not after it
    w = build_workload(workload_config(args))
    s = workload_stats(w)
    if args.format == "json":
        print(to_json({"workload": w.describe(), **s}))
    else:
        print(f"workload: {w.describe()}\n")
        print(format_stats(s))
    if args.plot:
        plot(w, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def convert(args: argparse.Namespace) -> int:
    w = build_workload(workload_config(args))
    write_trace(w, args.output)
    print(f"wrote {len(w)} requests to {args.output}", file=sys.stderr)
    return 0
