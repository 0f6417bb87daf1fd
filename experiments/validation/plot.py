"""The validation plots: real and simulated CDFs of TTFT and E2E latency, overlaid; with
repeated real runs, the simulated CDFs against the band the real ones span."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.ticker import NullFormatter, ScalarFormatter

from batchlab.core.result import RunResult
from batchlab.core.summary import per_request_latencies
from batchlab.experiments import plots

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


BAND = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E latency"))


def _latencies(res: RunResult, key: str) -> np.ndarray:
    v = res.itl if key == "itl" else per_request_latencies(res.requests)[key]
    v = np.asarray(v, float) * 1000
    return v[np.isfinite(v) & (v > 0)]


def cdf_band(path: Path, title: str, reals: list[RunResult], sim: RunResult,
             normalised: RunResult | None = None) -> Path:
    """Per latency, the band the real runs' CDFs span (at each quantile, the lowest and
    highest real value) and the simulated CDFs drawn over it."""
    fig, axes = plots.figure(1, len(BAND), title, width=4.2, height=3.6)
    levels = np.linspace(0.005, 0.995, 199)
    for ax, (key, label) in zip(axes, BAND):
        qs = [np.quantile(v, levels) for v in (_latencies(r, key) for r in reals) if v.size]
        if qs:
            q = np.vstack(qs)
            ax.fill_betweenx(levels, q.min(axis=0), q.max(axis=0), color="#999999", alpha=0.45,
                             label=f"real ({len(qs)} runs)", step="post")
        plots.cdf(ax, _latencies(sim, key), "sim (profile)", STYLE["profile"][0])
        if normalised is not None:
            before = len(ax.lines)
            plots.cdf(ax, _latencies(normalised, key), "sim (normalised)", "#9467bd")
            if len(ax.lines) > before:
                ax.lines[-1].set_linestyle("--")
        ax.set_xlabel(f"{label} (ms, log)")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize=7, loc="lower right")
    return plots.save(fig, path)
