"""`--plot DIR` (simulate, run): the standard plots of a run, one line per compared
run (policy, or policy+admission order): latency CDFs, seat and KV use over time, and
queue length over time. Drawn from the request and step tables, so a simulated and a
real run give the same plots."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.core.result import RunResult
from batchlab.core.summary import per_request_latencies
from batchlab.experiments import plots
from batchlab.experiments.errors import UserError

FILES = ("latency_cdf.png", "seats_kv_over_time.png", "queue_over_time.png")
BINS = 120  # time bins over the longest run


def check_plot_dir(plot_dir: str, step_table: bool = True) -> None:
    """Before any work: --plot names a folder (created if missing) and needs step tables."""
    if Path(plot_dir).exists() and not Path(plot_dir).is_dir():
        raise UserError(f"--plot {plot_dir}: is a file; expected a directory (created if missing)")
    if not step_table:
        raise UserError("--plot draws seat and KV use from the step table; drop --no-step-table")


def _colors(names: list[str]) -> dict[str, str]:
    """The policy's colour when each policy appears once, else one colour per run."""
    policies = [n.split("+")[0] for n in names]
    if len(set(policies)) == len(names) and all(p in plots.POLICY_COLORS for p in policies):
        return {n: plots.color(p) for n, p in zip(names, policies)}
    cycle = plots.plt.get_cmap("tab10")
    return {n: cycle(i % 10) for i, n in enumerate(names)}


def write_run_plots(plot_dir: str | Path, results: dict[str, RunResult]) -> list[Path]:
    out = Path(plot_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--plot {plot_dir}: cannot write there: {e.strerror}") from None
    colors = _colors(list(results))
    return [_latency_cdfs(out, results, colors), _use_over_time(out, results, colors),
            _queue_over_time(out, results, colors)]


def _latency_cdfs(out: Path, results: dict[str, RunResult], colors: dict) -> Path:
    fig, axes = plots.figure(2, 2, "Latency CDFs (finished requests)", width=5.5, height=3.8)
    panels = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "end-to-end latency"), ("queue", "queueing delay"))
    for name, res in results.items():
        lat = per_request_latencies(res.requests)
        for ax, (key, _) in zip(axes, panels):
            plots.cdf(ax, lat[key], name, colors[name])
    for ax, (_, label) in zip(axes, panels):
        ax.set_xlabel(f"{label} (s, log)")
        ax.legend(fontsize=8)
    return plots.save(fig, out / FILES[0])


def _edges(results: dict[str, RunResult]) -> np.ndarray:
    end = max(float((r.steps["start_s"] + r.steps["duration_s"]).max(initial=0.0)) for r in results.values())
    return np.linspace(0.0, max(end, 1e-9), BINS + 1)


def _time_weighted(steps: dict[str, np.ndarray], used: np.ndarray, total: np.ndarray,
                   edges: np.ndarray) -> np.ndarray:
    """Mean over replicas of used/total per time bin, weighted by time (idle time is 0)."""
    curves = []
    for r in np.unique(steps["replica"]):
        m = steps["replica"] == r
        start, dur, frac = steps["start_s"][m], steps["duration_s"][m], (used[m] / total[m])
        after = np.cumsum(frac * dur)
        t = np.column_stack([start, start + dur]).ravel()
        c = np.column_stack([after - frac * dur, after]).ravel()
        busy = np.interp(edges, t, c, left=0.0, right=c[-1] if len(c) else 0.0)
        curves.append(np.diff(busy) / np.diff(edges))
    return np.mean(curves, axis=0) if curves else np.zeros(len(edges) - 1)


def _use_over_time(out: Path, results: dict[str, RunResult], colors: dict) -> Path:
    fig, axes = plots.figure(2, 1, "Seats and KV cache in use over time", width=9, height=3.2, sharex=True)
    edges = _edges(results)
    mid = (edges[:-1] + edges[1:]) / 2
    for name, res in results.items():
        st = res.steps
        if not len(st["start_s"]):
            continue
        axes[0].plot(mid, 100 * _time_weighted(st, st["num_seqs"], st["seats"], edges),
                     label=name, color=colors[name])
        axes[1].plot(mid, 100 * _time_weighted(st, st["kv_blocks_used"], st["kv_blocks_total"], edges),
                     label=name, color=colors[name])
    axes[0].set_ylabel("seats computing (%)")
    axes[1].set_ylabel("KV blocks in use (%)")
    axes[1].set_xlabel("time (s)")
    for ax in axes:
        ax.set_ylim(0, 105)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    return plots.save(fig, out / FILES[1])


def _integral(times: np.ndarray, x: np.ndarray) -> np.ndarray:
    """For each x: the sum over `times` (NaN: never) of max(0, x - t), i.e. the integral
    up to x of how many of them have passed. Exact, O(n log n)."""
    t = np.sort(times[np.isfinite(times)])
    csum = np.concatenate(([0.0], np.cumsum(t)))
    k = np.searchsorted(t, x, side="right")
    return k * x - csum[k]


def _mean_count(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Time-weighted mean, per bin, of how many [start, end) intervals are open (an end
    of NaN: open to the end)."""
    area = _integral(starts, edges) - _integral(ends[np.isfinite(starts)], edges)
    return np.diff(area) / np.diff(edges)


def _queue_over_time(out: Path, results: dict[str, RunResult], colors: dict) -> Path:
    fig, axes = plots.figure(2, 1, "Requests waiting and in flight over time (mean per time bin)",
                             width=9, height=3.2, sharex=True)
    edges = _edges(results)
    mid = (edges[:-1] + edges[1:]) / 2
    for name, res in results.items():
        req = res.requests
        served = req["status"] != "rejected"  # a rejected request leaves at once
        arrival, first, finish = (req[c][served] for c in ("arrival_s", "first_scheduled_s", "finish_s"))
        axes[0].plot(mid, _mean_count(arrival, first, edges), label=name, color=colors[name])
        axes[1].plot(mid, _mean_count(first, finish, edges), label=name, color=colors[name])
    axes[0].set_ylabel("waiting (not yet\nscheduled)")
    axes[1].set_ylabel("in flight (admitted,\nunfinished)")
    axes[1].set_xlabel("time (s)")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    return plots.save(fig, out / FILES[2])
