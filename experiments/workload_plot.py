"""`batchlab workload stats --plot FILE`: a workload drawn as arrivals per second over
time and its two length histograms (matplotlib loads here, only when asked for)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from batchlab.core.workload import Workload
from batchlab.experiments.errors import UserError


def check_plot_path(path: str) -> None:
    """--plot must name a file in an existing directory (matplotlib creates no folders)."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"--plot {path}: is a directory; expected a file name such as plot.png")
    if not p.parent.is_dir():
        what = "not a directory" if p.parent.exists() else "no such directory"
        raise UserError(f"--plot {path}: {p.parent} is {what}; expected a file in an "
                        "existing directory")
    from matplotlib.backend_bases import FigureCanvasBase  # lazy: matplotlib, only with --plot
    kinds = FigureCanvasBase.get_supported_filetypes()
    if p.suffix.lstrip(".").lower() not in kinds:
        raise UserError(f"--plot {path}: unknown image type {p.suffix or '(none)'}; expected "
                        f"one of {', '.join('.' + k for k in sorted(kinds))}")


def plot(w: Workload, path: str) -> None:
    from batchlab.experiments.plots import figure, mark_x, save  # lazy: matplotlib, only with --plot

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
