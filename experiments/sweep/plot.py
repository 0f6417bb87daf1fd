"""`batchlab sweep`'s figure: the points by cost against the Pareto metric, with the
front (matplotlib loads with this module, when a sweep reports)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from batchlab.experiments.sweep.pareto import cost_key  # noqa: E402
from batchlab.core import atomic


def plot_pareto(out: Path, rows: list[dict], front: list[dict], metric: str) -> str:
    """out/pareto.png: every point by cost and metric, open where it misses its criteria,
    and the Pareto front as a line; returns the file's name."""
    x = cost_key(rows)
    fig, ax = plt.subplots(figsize=(6, 4))
    for ok, style in ((False, dict(mfc="white", color="0.6")), (True, dict(color="C0"))):
        pts = [r for r in rows if bool(r.get("passes")) == ok and isinstance(r.get(metric), (int, float))]
        ax.plot([r.get(x) for r in pts], [r[metric] for r in pts], "o", ls="none",
                label="meets criteria" if ok else "misses", **style)
    ax.plot([r[x] for r in front], [r[metric] for r in front], "-", color="C3", label="Pareto front")
    ax.set_xlabel("cost per hour (USD)" if x == "cost_per_hour" else "GPUs")
    ax.set_ylabel(metric)
    ax.legend(fontsize=8)
    fig.tight_layout()
    atomic.write_with(out / "pareto.png", lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
    return "pareto.png"
