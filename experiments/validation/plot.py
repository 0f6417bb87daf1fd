"""The validation plot: real and simulated CDFs of TTFT and E2E latency, overlaid."""
from __future__ import annotations

from pathlib import Path

from matplotlib.ticker import NullFormatter, ScalarFormatter

from core.result import RunResult
from core.summary import per_request_latencies
from experiments import plots

STYLE = {"real": ("#000000", "-"), "profile": ("#1f77b4", "-"), "profile+overhead": ("#ff7f0e", "--"),
         "speed-scaled": ("#d62728", "-."), "self-fit": ("#2ca02c", ":")}


def cdf_overlay(path: Path, title: str, runs: dict[str, RunResult]) -> Path:
    """runs: label -> result, the real one first."""
    fig, axes = plots.figure(1, 2, title, width=5.6, height=4.0)
    for label, res in runs.items():
        lat = per_request_latencies(res.requests)
        color, ls = STYLE.get(label, ("#555555", ":"))
        for ax, key in zip(axes, ("ttft", "e2el")):
            before = len(ax.lines)
            plots.cdf(ax, lat[key] * 1000, label if label == "real" else f"sim ({label})", color)
            if len(ax.lines) > before:  # nothing is drawn for a run with no finished request
                ax.lines[-1].set_linestyle(ls)
    axes[0].set_xlabel("TTFT (ms, log)")
    axes[1].set_xlabel("E2E latency (ms, log)")
    for ax in axes:
        ax.xaxis.set_major_formatter(ScalarFormatter())  # 100, 1000: not 10^2 over 4x10^1
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize=8, loc="lower right")
    return plots.save(fig, path)
