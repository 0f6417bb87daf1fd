"""The speculation plot: TPOT speedup over no speculation (median TPOT without / with)
against closed-loop users, one line per k, the break-even dashed."""
from __future__ import annotations

from pathlib import Path

from batchlab.core import atomic


def plot_speedups(path: Path, rows, ks: list[int], title: str) -> None:
    import matplotlib  # lazy: matplotlib, only when --out writes the plot
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as above

    off = {r.users: r for r in rows if r.k == 0}
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for k in ks:
        mine = sorted((r for r in rows if r.k == k), key=lambda r: r.users)
        xs = [r.users for r in mine]
        axes[0].plot(xs, [off[r.users].median_tpot_ms / r.median_tpot_ms for r in mine], "o-", label=f"k={k}")
        axes[1].plot(xs, [r.output_throughput / off[r.users].output_throughput for r in mine], "o-",
                     label=f"k={k}")
    for ax, what in zip(axes, ("TPOT speedup (p50 without / with)", "output throughput with / without")):
        ax.axhline(1.0, color="k", ls="--", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("closed-loop users (about the decode batch)")
        ax.set_ylabel(what)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    atomic.write_with(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
