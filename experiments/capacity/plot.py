"""Capacity plots: each tried point's latency against load (max-rate: the rate;
replicas: the GPUs, replicas x TP, so that candidates of different TP degrees compare
on what they cost), passing points filled, the SLO limits dashed. An axis whose values
all tie gets a window around them, and a latency axis goes linear where a log scale
cannot show it (values not all positive, or all equal)."""
from __future__ import annotations

from pathlib import Path

from batchlab.experiments.capacity.point import Criteria
from batchlab.experiments.capacity.search import Answer
from batchlab.core import atomic
from batchlab.experiments.capacity.limits import spread_limits


def plot_answers(path: Path, answers: list[Answer], criteria: Criteria, title: str) -> str:
    import matplotlib  # lazy: matplotlib, only when --out writes the plots
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as above

    metrics = [m for m, _ in criteria.limits()] or ["ttft"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4), squeeze=False)
    x_key = "rate" if answers and answers[0].kind == "max-rate" else "gpus"
    for ax, m in zip(axes[0], metrics):
        key = criteria.key(m)
        xs, ys = [], []
        for a in answers:
            pts = [p for p in a.points if isinstance(p.get(key), (int, float)) and p[key] == p[key]]
            line, = ax.plot([p[x_key] for p in pts], [p[key] for p in pts], "-", lw=1, label=a.label)
            for p in pts:
                ax.plot(p[x_key], p[key], "o", color=line.get_color(),
                        mfc=line.get_color() if p["passes"] else "white")
            xs += [p[x_key] for p in pts]
            ys += [p[key] for p in pts]
        limit = getattr(criteria.slo, f"{m}_ms")
        if limit is not None:
            ax.axhline(limit, color="k", ls="--", lw=0.8)
            ys.append(limit)
        log = bool(ys) and min(ys) > 0 and max(ys) > min(ys)
        ax.set_yscale("log" if log else "linear")
        for values, setter in ((xs, ax.set_xlim), (ys, ax.set_ylim)):
            lim = spread_limits(values)
            if lim:
                setter(*lim)
        ax.set_xlabel("request rate (req/s)" if x_key == "rate" else "GPUs (replicas x TP)")
        ax.set_ylabel(f"{key}" + (" (log)" if log else ""))
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    atomic.write_with(path, lambda tmp: fig.savefig(tmp, dpi=110, format=Path(path).suffix[1:] or "png"))
    plt.close(fig)
    return path.name
