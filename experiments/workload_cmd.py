"""`batchlab workload stats|convert SOURCE`: inspect a workload, or save it in the
batchlab trace format. SOURCE and the workload options mean what they mean for
simulate and run; a --config TOML contributes its [workload] table."""
from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import numpy as np

from batchlab.core.workload import (Workload, WorkloadConfig, build_workload, format_stats,
                           workload_stats, write_trace)
from batchlab.experiments.config import build_config, read_toml
from batchlab.experiments.errors import UserError
from batchlab.experiments.options import name_flag
from batchlab.experiments.output import to_json
from batchlab.experiments.workload_options import add_workload_options, workload_overrides


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


def check_plot_path(path: str) -> None:
    """--plot must name a file in an existing directory (matplotlib creates no folders)."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"--plot {path}: is a directory; expected a file name such as plot.png")
    if not p.parent.is_dir():
        what = "not a directory" if p.parent.exists() else "no such directory"
        raise UserError(f"--plot {path}: {p.parent} is {what}; expected a file in an "
                        "existing directory")
    from matplotlib.backend_bases import FigureCanvasBase  # matplotlib only when asked for
    kinds = FigureCanvasBase.get_supported_filetypes()
    if p.suffix.lstrip(".").lower() not in kinds:
        raise UserError(f"--plot {path}: unknown image type {p.suffix or '(none)'}; expected "
                        f"one of {', '.join('.' + k for k in sorted(kinds))}")


def plot(w: Workload, path: str) -> None:
    from batchlab.experiments.plots import figure, mark_x, save  # matplotlib only when asked for

    title = textwrap.fill(w.describe(), 150)  # every step, so the figure says what it shows
    fig, (ax_t, ax_p, ax_o) = figure(1, 3, title=title, width=5.0, height=3.6)
    span = float(w.arrival[-1] - w.arrival[0]) if len(w) else 0.0
    bin_s = max(1.0, span / 2000)  # arrivals per second, in at most ~2000 bins
    counts = np.bincount(((w.arrival - w.arrival[0]) // bin_s).astype(np.int64))
    ax_t.step(np.arange(len(counts)) * bin_s, counts / bin_s, where="post", lw=0.8)
    ax_t.set_xlabel("time (s)")
    ax_t.set_ylabel("arrivals per second" + (f" ({bin_s:.3g} s bins)" if bin_s > 1 else ""))
    ax_t.set_title("arrivals over time")
    for ax, col, name in ((ax_p, w.prompt_len, "prompt"), (ax_o, w.output_len, "output")):
        lo, hi = int(col.min()), int(col.max())
        log = hi > 50 * lo
        bins = np.geomspace(lo, hi + 1, 60) if log else np.linspace(lo, hi + 1, 60)
        ax.hist(col, bins=bins, color="#1f77b4")
        if log:
            ax.set_xscale("log")
        for q, label in ((50, "p50"), (99, "p99")):
            mark_x(ax, float(np.percentile(col, q)), label)
        ax.set_xlabel(f"{name} length (tokens)")
        ax.set_ylabel("requests")
        ax.set_title(f"{name} lengths (mean {col.mean():.0f})")
    try:
        save(fig, path)
    except OSError as e:  # e.g. no permission to write there
        raise UserError(f"--plot {path}: cannot write: {e.strerror}") from None
