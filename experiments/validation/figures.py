"""The validation's figures, as data (experiments/figures.py; drawn by experiments/plots.py):
real and simulated CDFs of TTFT and E2E latency overlaid (cdf.png), and with repeated real
runs the simulated CDFs against the band the real ones span (cdf_band.png)."""
from __future__ import annotations

import numpy as np

from batchlab.core.result import RunResult
from batchlab.core.summary import per_request_latencies
from batchlab.experiments import figures as fg

# label -> (colour, line style): the real run, the headline, the normalised variant
STYLE = {"real": ("#000000", "-"), "profile": ("#1f77b4", "-"), "normalised": ("#9467bd", "--")}
BAND = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E latency"))
LEVELS = np.linspace(0.005, 0.995, 199)


def _ms(res: RunResult, key: str) -> np.ndarray:
    v = res.itl if key == "itl" else per_request_latencies(res.requests)[key]
    v = np.asarray(v, float) * 1000
    return v[np.isfinite(v) & (v > 0)]


def _axis(xlabel: str, marks: list, legend: fg.Legend) -> fg.Panel:
    return fg.Panel(marks, xlabel=f"{xlabel} (ms, log)", plain_x=True, legend=legend)


def cdf_overlay(filename: str, title: str, runs: dict[str, RunResult]) -> fg.Figure:
    """runs: label -> result, the real one first; each drawn in its STYLE."""
    panels = []
    for key, label in (("ttft", "TTFT"), ("e2el", "E2E latency")):
        marks = [fg.Cdf(per_request_latencies(res.requests)[key] * 1000, name if name == "real" else f"sim ({name})",
                        STYLE.get(name, ("#555555", ":"))[0], ls=STYLE.get(name, ("#555555", ":"))[1])
                 for name, res in runs.items()]
        panels.append(_axis(label, marks, fg.Legend(8, "lower right")))
    return fg.Figure(filename, panels, 1, 2, title, width=5.6, height=4.0)


def cdf_band(filename: str, title: str, reals: list[RunResult], sim: RunResult,
             normalised: RunResult | None = None, verdicts: dict[str, str] | None = None) -> fg.Figure:
    """Per latency, the band the real runs' CDFs span (at each quantile, the lowest and
    highest real value) and the simulated CDFs drawn over it; verdicts (metric label ->
    'p50 ok, p90 miss, ...') head each panel, so that the plot says what the table says."""
    panels = []
    for key, label in BAND:
        qs = [np.quantile(v, LEVELS) for v in (_ms(r, key) for r in reals) if v.size]
        marks: list = []
        if qs:
            q = np.vstack(qs)
            marks.append(fg.Band(LEVELS, q.min(axis=0), q.max(axis=0), f"real ({len(qs)} runs)"))
        marks.append(fg.Cdf(_ms(sim, key), "sim (profile)", STYLE["profile"][0]))
        if normalised is not None:
            marks.append(fg.Cdf(_ms(normalised, key), "sim (normalised)", STYLE["normalised"][0],
                                ls=STYLE["normalised"][1]))
        panel = _axis(label, marks, fg.Legend(7, "lower right"))
        if verdicts and verdicts.get(label):
            panel.title, panel.title_size = verdicts[label], 8
        panels.append(panel)
    return fg.Figure(filename, panels, 1, len(BAND), title, width=4.2, height=3.6)
