"""Capacity plots: each tried point's latency against load (max-rate: the rate;
replicas: the replica count), passing points filled, the SLO limits dashed."""
from __future__ import annotations

from pathlib import Path

from batchlab.experiments.capacity.point import Criteria
from batchlab.experiments.capacity.search import Answer
from batchlab.core import atomic


def plot_answers(path: Path, answers: list[Answer], criteria: Criteria, title: str) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [m for m, _ in criteria.limits()] or ["ttft"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4), squeeze=False)
    x_key = "rate" if answers and answers[0].kind == "max-rate" else "replicas"
    for ax, m in zip(axes[0], metrics):
        key = criteria.key(m)
        for a in answers:
            pts = [p for p in a.points if p.get(key) is not None]
            line, = ax.plot([p[x_key] for p in pts], [p[key] for p in pts], "-", lw=1, label=a.label)
            for p in pts:
                ax.plot(p[x_key], p[key], "o", color=line.get_color(),
                        mfc=line.get_color() if p["passes"] else "white")
        limit = getattr(criteria.slo, f"{m}_ms")
        if limit is not None:
            ax.axhline(limit, color="k", ls="--", lw=0.8)
        ax.set_yscale("log")
        ax.set_xlabel("request rate (req/s)" if x_key == "rate" else "replicas")
        ax.set_ylabel(f"{key} (log)")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    atomic.write_with(path, lambda tmp: fig.savefig(tmp, dpi=110, format=Path(path).suffix[1:] or "png"))
    plt.close(fig)
    return path.name
