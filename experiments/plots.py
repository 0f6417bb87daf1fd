"""Plotting helpers shared by the studies: the seat timeline, CDFs, utilisation over
time, markers. matplotlib with the Agg backend (files only, no display needed)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

# One colour per policy, the same in every study's plots.
POLICY_COLORS = {"static": "#d62728", "continuous": "#1f77b4", "chunked": "#2ca02c"}
LONG_COLOR = "#5a0000"
# Short replies cycle through these (no reds: red is the long reply).
_SHORT = [plt.get_cmap("tab20")(i) for i in (0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 16, 17, 18, 19)]


def color(policy: str, default: str = "#555555") -> str:
    return POLICY_COLORS.get(policy, default)


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
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def batch_size_axes(axes: Iterable[plt.Axes], ticks: Sequence[int]) -> None:
    """Log2 x axes over batch sizes, labelled with the sizes themselves."""
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("sequences in the decode step (batch size)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)


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


def utilisation_over_time(start: np.ndarray, duration: np.ndarray, used: np.ndarray,
                          seats: float, bin_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Seat utilisation per time bin, weighted by time (idle time counts as 0).
    Returns (bin centres in s, utilisation in [0, 1])."""
    if len(start) == 0:
        return np.zeros(0), np.zeros(0)
    end = start + duration
    after = np.cumsum(used * duration)
    before = after - used * duration
    # Busy seat-seconds is piecewise linear: rising within steps, flat in idle gaps.
    t = np.column_stack([start, end]).ravel()
    c = np.column_stack([before, after]).ravel()
    edges = np.arange(0.0, end[-1] + bin_s, bin_s)
    busy = np.interp(edges, t, c, left=0.0, right=c[-1])
    return (edges[:-1] + edges[1:]) / 2, np.diff(busy) / (seats * np.diff(edges))


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
