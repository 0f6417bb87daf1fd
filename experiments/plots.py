"""Drawing with matplotlib (the Agg backend: files only, no display needed). `draw` renders
a figure described as data (experiments/figures.py: the studies' figures) to PNG with the
helpers below (seat timeline, CDFs, bars, markers); the run plots call figure, save and
cdf directly. Imported only where a figure is drawn."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import NullFormatter, ScalarFormatter  # noqa: E402

from batchlab.experiments import figures as fg  # noqa: E402
from batchlab.experiments.figures import POLICY_COLORS, color  # noqa: E402,F401  (one palette)
from batchlab.core import atomic

LONG_COLOR = "#5a0000"
# Short replies cycle through these (no reds: red is the long reply).
_SHORT = [plt.get_cmap("tab20")(i) for i in (0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 16, 17, 18, 19)]


def figure(nrows: int = 1, ncols: int = 1, title: str | None = None, width: float = 6.0,
           height: float = 4.0, **kw) -> tuple[plt.Figure, np.ndarray]:
    """A figure of nrows x ncols panels; axes always returned as a flat array."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows),
                             squeeze=False, **kw)
    if title:
        fig.suptitle(title, fontsize=13)
    return fig, axes.ravel()


def save(fig: plt.Figure, path: str | Path) -> Path:
    p = Path(path)
    fig.tight_layout()
    atomic.write_with(p, lambda tmp: fig.savefig(tmp, dpi=110, format=p.suffix[1:] or "png"))
    plt.close(fig)
    return p


def mark_x(ax: plt.Axes, x: float, text: str, color: str = "#444444", y: float = 0.97) -> None:
    """A dashed vertical line with a label near the top."""
    ax.axvline(x, color=color, ls="--", lw=1)
    ax.text(x, y, f" {text}", transform=ax.get_xaxis_transform(), color=color, fontsize=8,
            va="top", ha="left", rotation=90)


def mark_y(ax: plt.Axes, y: float, text: str, color: str = "#444444") -> None:
    ax.axhline(y, color=color, ls=":", lw=1)
    ax.text(0.01, y, f"{text} ", transform=ax.get_yaxis_transform(), color=color, fontsize=8,
            va="bottom", ha="left")


def cdf(ax: plt.Axes, values: Iterable[float], label: str, color: str | None = None,
        log: bool = True) -> None:
    """Empirical CDF (step plot). Non-positive values are dropped on a log axis."""
    v = np.sort(np.asarray(list(values), dtype=float))
    v = v[np.isfinite(v)]
    if log:
        v = v[v > 0]
        ax.set_xscale("log")
    if v.size:
        ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=label, color=color)
    ax.set_ylim(0, 1.01)
    ax.set_ylabel("fraction of requests")
    ax.grid(True, alpha=0.3)


def seat_timeline(ax: plt.Axes, holders: np.ndarray, computed: np.ndarray,
                  long_ids: set[int], title: str, x_edges: np.ndarray | None = None) -> None:
    """Which request holds each seat at each step (the seed's step picture).

    holders: [steps, seats] request ids (-1 = empty seat); computed: [steps, seats] True
    where that seat's sequence ran in the step (False = held but paused). x_edges:
    steps + 1 column edges (e.g. step start times in seconds, so each step is as wide
    as it took); None: one unit per step."""
    steps, seats = holders.shape
    img = np.ones((seats, steps, 3))
    for s in range(seats):
        ids = holders[:, s]
        for rid in np.unique(ids[ids >= 0]):
            at = ids == rid
            rgb = np.array(to_rgb(LONG_COLOR if rid in long_ids else _SHORT[rid % len(_SHORT)]))
            img[s, at] = rgb
            paused = at & ~computed[:, s]
            img[s, paused] = 0.35 * rgb + 0.65  # faded: holds the seat, does no work
    if x_edges is None:
        ax.imshow(img, aspect="auto", interpolation="nearest", origin="lower",
                  extent=(0, steps, -0.5, seats - 0.5))
    else:
        ax.pcolormesh(np.asarray(x_edges, dtype=float), np.arange(seats + 1) - 0.5, img)
    ax.set_yticks(range(seats))
    ax.set_ylabel("seat")
    ax.set_title(title, fontsize=10)


def seat_legend(ax: plt.Axes) -> None:
    handles = [Patch(color=_SHORT[0], label="short reply (one colour per request)"),
               Patch(color=LONG_COLOR, label="long reply"),
               Patch(color=0.35 * np.array(to_rgb(_SHORT[0])) + 0.65,
                     label="seat held, paused (prefill-only step)"),
               Patch(facecolor="white", edgecolor="#999999", label="empty seat")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.32), ncol=4,
              fontsize=8, frameon=False)


def bars(ax: plt.Axes, labels: Sequence[str], values: Sequence[float], title: str,
         ylabel: str, value_fmt: str = "{:.0f}") -> None:
    """One bar per policy, coloured by policy, value written on top."""
    x = np.arange(len(labels))
    ax.bar(x, values, color=[color(l) for l in labels])
    for xi, v in zip(x, values):
        ax.text(xi, v, value_fmt.format(v), ha="center", va="bottom", fontsize=9)
    ax.set_xticks(x, labels)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)


def grouped_bars(ax: plt.Axes, labels: Sequence[str], series: dict[str, Sequence[float]],
                 title: str, ylabel: str, value_fmt: str = "{:.0f}") -> None:
    """Bars per label (policy), one bar per series side by side, coloured by policy and
    told apart by hatching (first series plain); value written on top."""
    x = np.arange(len(labels))
    width = 0.8 / max(1, len(series))
    hatches = ["", "//", "..", "xx"]
    for k, (name, values) in enumerate(series.items()):
        xs = x - 0.4 + width * (k + 0.5)
        ax.bar(xs, values, width, color=[color(l) for l in labels], hatch=hatches[k % 4],
               edgecolor="white" if k == 0 else "#333333", label=name)
        for xi, v in zip(xs, values):
            if np.isfinite(v):
                ax.text(xi, v, value_fmt.format(v), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, labels)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    # Legend patches in neutral grey: the colours already name the policies.
    ax.legend(handles=[Patch(facecolor="#bbbbbb", hatch=hatches[k % 4], edgecolor="#333333",
                             label=name) for k, name in enumerate(series)], fontsize=8)


def draw(spec: fg.Figure, out_dir: str | Path) -> Path:
    """Render a figure described as data to out_dir/spec.filename."""
    fig, axes = figure(spec.rows, spec.cols, spec.title, width=spec.width, height=spec.height,
                       **({"sharex": True} if spec.sharex else {}))
    for ax, panel in zip(axes, spec.panels):
        _panel(ax, panel)
    for ax in axes[len(spec.panels):]:  # a grid's last row, part filled
        ax.set_axis_off()
    return save(fig, Path(out_dir) / spec.filename)


def _panel(ax: plt.Axes, p: fg.Panel) -> None:
    for mark in p.marks:
        _MARKS[type(mark)](ax, mark)
    if p.twin is not None:
        twin = ax.twinx()
        for mark in p.twin.marks:
            _MARKS[type(mark)](twin, mark)
        if p.twin.ylabel is not None:
            twin.set_ylabel(p.twin.ylabel)
    if p.xscale is not None:
        ax.set_xscale(p.xscale, **({"base": p.xscale_base} if p.xscale_base else {}))
    if p.yscale is not None:
        ax.set_yscale(p.yscale)
    if p.xticks is not None:
        ax.set_xticks(p.xticks, [str(t) for t in p.xticks])
    if p.plain_x:
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
    if p.plain_y:
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
    if p.xlim is not None:
        ax.set_xlim(*p.xlim)
    if p.ylim is not None:
        ax.set_ylim(*p.ylim)
    if p.title is not None:
        ax.set_title(p.title, fontsize=p.title_size)
    if p.xlabel is not None:
        ax.set_xlabel(p.xlabel)
    if p.ylabel is not None:
        ax.set_ylabel(p.ylabel)
    if p.grid is not None:
        ax.grid(True, alpha=p.grid.alpha, **({"which": p.grid.which} if p.grid.which else {}))
    if isinstance(p.legend, fg.SeatLegend):
        seat_legend(ax)
    elif p.legend is not None:
        ax.legend(**{k: v for k, v in (("fontsize", p.legend.fontsize), ("loc", p.legend.loc)) if v is not None})


def _line(ax: plt.Axes, m: fg.Line) -> None:
    style = {"label": m.label, "color": m.color, "marker": m.marker, "ls": m.ls, "lw": m.lw,
             "ms": m.ms, "mfc": m.mfc}
    ax.plot(m.x, m.y, **{k: v for k, v in style.items() if v is not None})


def _cdf(ax: plt.Axes, m: fg.Cdf) -> None:
    before = len(ax.lines)
    cdf(ax, m.values, m.label, m.color, m.log)
    if m.ls is not None and len(ax.lines) > before:  # nothing is drawn for no values
        ax.lines[-1].set_linestyle(m.ls)


def _band(ax: plt.Axes, m: fg.Band) -> None:
    ax.fill_betweenx(m.levels, m.low, m.high, color=m.color, alpha=m.alpha, label=m.label, step="post")


def _vline(ax: plt.Axes, m: fg.VLine) -> None:
    ax.axvline(m.x, color=m.color, ls=m.ls, lw=m.lw, **({"label": m.label} if m.label else {}))


_MARKS = {
    fg.Line: _line,
    fg.VLine: _vline,
    fg.MarkX: lambda ax, m: mark_x(ax, m.x, m.text, m.color, m.y),
    fg.MarkY: lambda ax, m: mark_y(ax, m.y, m.text, m.color),
    fg.Cdf: _cdf,
    fg.Band: _band,
    fg.Bars: lambda ax, m: bars(ax, m.labels, m.values, m.title, m.ylabel, m.value_fmt),
    fg.GroupedBars: lambda ax, m: grouped_bars(ax, m.labels, m.series, m.title, m.ylabel, m.value_fmt),
    fg.SeatGrid: lambda ax, m: seat_timeline(ax, m.holders, m.computed, m.long_ids, m.title, m.x_edges),
}
