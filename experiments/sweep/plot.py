"""`batchlab sweep`'s figure (matplotlib loads with this module, when a sweep reports):
left, vLLM's Pareto convention: output tokens/s per user against tokens/s per GPU, every
point, open where it misses its criteria, the front of passing points as a line; right,
the points by cost against the Pareto metric, with the cost front. Axes whose values
all tie get a window around them, not a zero-width one."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from batchlab.core import atomic
from batchlab.experiments.capacity.limits import spread_limits
from batchlab.experiments.sweep.pareto import PER_GPU, PER_USER, cost_key, throughput_front


def _numbers(rows: list[dict], *keys: str) -> list[dict]:
    return [r for r in rows if all(isinstance(r.get(k), (int, float)) and r.get(k) == r.get(k) for k in keys)]


def _scatter(ax, rows: list[dict], x: str, y: str) -> None:
    for ok, style in ((False, {"mfc": "white", "color": "0.6"}), (True, {"color": "C0"})):
        pts = [r for r in rows if bool(r.get("passes")) == ok]
        ax.plot([r[x] for r in pts], [r[y] for r in pts], "o", ls="none",
                label="meets criteria" if ok else "misses", **style)
    for key, setter in ((x, ax.set_xlim), (y, ax.set_ylim)):
        lim = spread_limits([r[key] for r in rows])
        if lim:
            setter(*lim)


def plot_pareto(out: Path, rows: list[dict], front: list[dict], metric: str) -> str:
    """out/pareto.png; returns the file's name."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    pts = _numbers(rows, PER_GPU, PER_USER)
    if pts:
        _scatter(left, pts, PER_GPU, PER_USER)
        tf = throughput_front(pts)
        left.plot([r[PER_GPU] for r in tf], [r[PER_USER] for r in tf], "-", color="C3",
                  label="Pareto front (passing)")
        left.legend(fontsize=8)
    else:
        left.text(0.5, 0.5, "no point has throughput and TPOT\n(capacity-search points)", ha="center",
                  va="center", transform=left.transAxes)
    left.set_xlabel("output tokens/s per GPU")
    left.set_ylabel("output tokens/s per user (1000 / median TPOT)")
    x = cost_key(rows)
    pts = _numbers(rows, x, metric)
    if pts:
        _scatter(right, pts, x, metric)
        ys = [r[metric] for r in pts]
        if min(ys) > 0 and max(ys) > 20 * min(ys):  # latencies of failing points run far off
            right.set_yscale("log")
    right.plot([r[x] for r in front], [r[metric] for r in front], "-", color="C3", label="Pareto front")
    right.set_xlabel("cost per hour (USD)" if x == "cost_per_hour" else "GPUs")
    right.set_ylabel(metric)
    right.legend(fontsize=8)
    fig.tight_layout()
    atomic.write_with(out / "pareto.png", lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
    return "pareto.png"
