"""Claim 2: with 8 seats and replies of very different lengths (many ~12-40 tokens, one
~500 in every 8), static batching's slot utilisation collapses while continuous batching
keeps the seats busy; throughput and queueing delay side by side."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.core.config import SchedulerConfig
from batchlab.core.summary import per_request_latencies
from batchlab.experiments import plots
from batchlab.experiments.markdown import Report, fmt
from batchlab.experiments.studies.common import Progress, RowLog, command_line, pick, preset, setup_line
from batchlab.experiments.studies.registry import register
from batchlab.experiments.studies.seats import SeatTracker
from batchlab.experiments.studies.static_vs_continuous_setup import (HARDWARE, LONG, MODEL, NAME, POLICIES,
                                                            one_long_per_group, static_expectation)
from batchlab.sim import simulate

PARAMS = {
    "full": dict(requests=512, users=32, seats=8, timeline_steps=700),
    "small": dict(requests=128, users=32, seats=8, timeline_steps=300),
}
COLUMNS = ("policy", "slot_utilization", "time_weighted_utilization", "seat_occupancy",
           "output_throughput", "request_throughput", "median_queueing_delay_ms",
           "p99_queueing_delay_ms", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
           "median_e2el_ms", "num_steps", "completed")


@register(NAME, "claim 2: 8 seats, one ~500-token reply among short ones: slot utilisation, "
                "throughput and queueing delay of static vs continuous (and chunked); "
                "--backend serves a reduced workload on the CPU torch backend", backend=True)
def run(out_dir: Path, size: str = "full", backend: bool = False, quiet: bool = False) -> dict:
    p = pick(PARAMS, size)
    out_dir.mkdir(parents=True, exist_ok=True)
    progress = Progress(NAME, quiet)
    cost, blocks, meta, _ = preset(MODEL, HARDWARE)
    seats = p["seats"]
    w = one_long_per_group(p["requests"], seats, p["users"])
    long_ids = set(np.flatnonzero(w.output_len >= LONG[0]).tolist())
    runs, trackers = {}, {}
    with RowLog(out_dir / "results.csv", COLUMNS) as log:
        for policy in POLICIES:
            tracker = SeatTracker(seats, p["timeline_steps"])
            cfg = SchedulerConfig(policy=policy, max_num_seqs=seats)
            res = simulate(w, cfg, cost, blocks, meta=meta, observer=tracker)
            s, st = res.summary(), res.steps
            row = {"policy": policy, **{k: s[k] for k in COLUMNS if k in s},
                   "time_weighted_utilization": float((st["num_seqs"] * st["duration_s"]).sum()
                                                      / (seats * st["duration_s"].sum())),
                   "seat_occupancy": tracker.occupancy}
            log.add(row)
            runs[policy], trackers[policy] = res, tracker
            progress(f"{policy}: slot utilisation {row['slot_utilization']:.1%}, "
                     f"{row['output_throughput']:.0f} output tokens/s")
        rows = {r["policy"]: r for r in log.rows}
    expected = static_expectation(w.output_len, seats)
    files = _plots(out_dir, runs, trackers, long_ids, seats)
    result = {
        "name": NAME, "size": size, "setup": setup_line(meta), "workload": w.describe(),
        "static_expected_utilization": expected, "policies": rows, "files": files,
    }
    if backend:
        from batchlab.experiments.studies import static_vs_continuous_backend  # needs torch: only when asked
        result["backend"] = static_vs_continuous_backend.run(out_dir, size, progress)
        files += result["backend"]["files"]
    result["elapsed_s"] = progress.elapsed
    _report(out_dir, result, size, backend)
    result["files"].append("report.md")
    return result


def _plots(out_dir: Path, runs: dict, trackers: dict, long_ids: set[int], seats: int) -> list[str]:
    fig, axes = plots.figure(2, 1, "Seat timeline: who holds each of the 8 seats at each step",
                             width=11, height=2.6, sharex=True)
    for ax, policy in zip(axes, ("static", "continuous")):
        holders, ran = trackers[policy].grid()
        u = runs[policy].summary()["slot_utilization"]
        plots.seat_timeline(ax, holders, ran, long_ids, f"{policy} batching "
                            f"(slot utilisation over the whole run {u:.0%})")
    axes[-1].set_xlabel("engine step")
    plots.seat_legend(axes[-1])
    plots.save(fig, out_dir / "seat_timeline.png")

    fig, axes = plots.figure(1, 1, "Slot utilisation over time (time-weighted, 8 seats)",
                             width=9, height=3.6)
    ax = axes[0]
    for policy, res in runs.items():
        st = res.steps
        t_end = st["start_s"][-1] + st["duration_s"][-1]
        # 40 bins per run: static's batches (~6 s each) would alias with finer ones.
        t, u = plots.utilisation_over_time(st["start_s"], st["duration_s"], st["num_seqs"],
                                           seats, t_end / 40)
        ax.plot(t, 100 * u, label=policy, color=plots.color(policy))
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("seats computing (%)")
    ax.set_ylim(0, 105)
    ax.grid(True, alpha=0.3)
    ax.legend()
    plots.save(fig, out_dir / "utilisation_over_time.png")

    summaries = {p: r.summary() for p, r in runs.items()}
    names = list(summaries)
    fig, axes = plots.figure(1, 3, "Throughput and queueing delay, side by side", width=4.2, height=3.6)
    plots.bars(axes[0], names, [summaries[n]["output_throughput"] for n in names],
               "output throughput", "tokens/s")
    plots.bars(axes[1], names, [summaries[n]["median_queueing_delay_ms"] / 1000 for n in names],
               "queueing delay p50", "seconds", "{:.1f}")
    plots.bars(axes[2], names, [summaries[n]["p99_queueing_delay_ms"] / 1000 for n in names],
               "queueing delay p99", "seconds", "{:.1f}")
    plots.save(fig, out_dir / "throughput_queueing.png")

    fig, axes = plots.figure(1, 2, "Latency CDFs", width=5.5, height=3.8)
    for policy, res in runs.items():
        lat = per_request_latencies(res.requests)
        plots.cdf(axes[0], lat["queue"], policy, plots.color(policy))
        plots.cdf(axes[1], lat["e2el"], policy, plots.color(policy))
    axes[0].set_xlabel("queueing delay (s, log)")
    axes[1].set_xlabel("end-to-end latency (s, log)")
    for ax in axes:
        ax.legend()
    plots.save(fig, out_dir / "latency_cdf.png")
    return ["results.csv", "seat_timeline.png", "utilisation_over_time.png",
            "throughput_queueing.png", "latency_cdf.png"]


def _report(out_dir: Path, r: dict, size: str, backend: bool = False) -> None:
    rows, exp = r["policies"], r["static_expected_utilization"]
    st, co, ch = rows["static"], rows["continuous"], rows["chunked"]
    rep = Report("Claim 2: static vs continuous batching")
    rep.para(f"Command: `{command_line(NAME, size, backend)}`. Setup: {r['setup']}. Workload: "
             f"{r['workload']}. 8 seats (max_num_seqs=8); the 32 users send together at t=0, "
             f"so every static batch holds one group of 8 with its one long reply.")
    rep.claim(
        "with 8 seats and replies of very different lengths (many ~12-40 tokens, one ~500), "
        "static batching's slot utilisation falls toward ~9% while continuous stays above ~90%.",
        f"static **{st['slot_utilization']:.1%}** (the batch arithmetic predicts {exp:.1%}); "
        f"continuous (vLLM-v0 style) **{co['slot_utilization']:.1%}** (seats held "
        f"{co['seat_occupancy']:.1%}); chunked prefill **{ch['slot_utilization']:.1%}**. "
        f"Continuous serves {co['output_throughput'] / st['output_throughput']:.1f}x static's "
        f"output tokens/s and its median queueing delay is "
        f"{st['median_queueing_delay_ms'] / co['median_queueing_delay_ms']:.1f}x shorter.",
        "slot utilisation here is the mean over steps of (sequences in the step / seats). "
        "A static batch of 8 with one ~500-token reply and seven of ~26 tokens runs ~500 "
        "steps and fills (500 + 7 x 26) of 8 x 500 seat-steps = ~17%; it can never fall "
        "below 1/8 = 12.5%, because a step always has at least one busy seat. ~9% needs a "
        "different measure (time-weighting over idle gaps, or more than 8 seats: the README's "
        "32-seat chat mix gives static ~12%). Continuous stays near, not above, 90% by this "
        "measure because it is vLLM-v0 style: a step that admits a request runs only its "
        "prefill while the other seats' decodes wait (their seats are held, not computing); "
        "chunked prefill mixes the two and stays above 90%. Utilisation also drops at the "
        "end of the run, when no requests are left to fill freed seats.")
    rep.heading("Results")
    rep.table(
        ["policy", "slot util.", "time-weighted", "seats held", "output tok/s", "req/s",
         "queueing p50 (s)", "queueing p99 (s)", "TTFT p50 (s)", "TTFT p99 (s)", "E2E p50 (s)", "steps"],
        [[n, fmt(x["slot_utilization"], "{:.1%}"), fmt(x["time_weighted_utilization"], "{:.1%}"),
          fmt(x["seat_occupancy"], "{:.1%}"), fmt(x["output_throughput"], "{:.0f}"),
          fmt(x["request_throughput"], "{:.2f}"),
          fmt(x["median_queueing_delay_ms"] / 1000, "{:.2f}"), fmt(x["p99_queueing_delay_ms"] / 1000, "{:.2f}"),
          fmt(x["median_ttft_ms"] / 1000, "{:.2f}"), fmt(x["p99_ttft_ms"] / 1000, "{:.2f}"),
          fmt(x["median_e2el_ms"] / 1000, "{:.2f}"), fmt(x["num_steps"], "{:.0f}")]
         for n, x in rows.items()])
    rep.para("*slot util.*: mean over steps of sequences computed / seats (batchlab's "
             "`slot_utilization`). *time-weighted*: the same weighted by step duration. "
             "*seats held*: seats occupied by an admitted, unfinished request, including "
             "decodes paused by a prefill-only step.")
    rep.heading("Seat timeline")
    rep.para("Each row is a seat, each column an engine step, each colour a request (dark red: "
             "the long reply). Static keeps the batch until the long reply ends, so seven seats "
             "sit empty for most of it; continuous refills a seat the step after it frees. "
             "Long replies accumulate under continuous batching (each keeps its seat ~500 "
             "steps while short ones cycle through the others), yet every seat keeps computing. "
             "Faded cells are seats whose decode waits while a prefill-only step admits someone.")
    rep.image("seat_timeline.png", "seat timeline, static vs continuous")
    rep.image("utilisation_over_time.png", "slot utilisation over time")
    rep.image("throughput_queueing.png", "throughput and queueing delay")
    rep.image("latency_cdf.png", "queueing delay and end-to-end latency CDFs")
    if r.get("backend"):
        from batchlab.experiments.studies import static_vs_continuous_backend
        static_vs_continuous_backend.report_section(rep, r["backend"], r)
    else:
        rep.para("The real-backend variant (`--backend`) serves a reduced version of this "
                 "workload on the CPU torch backend; it was not run for this report.")
    rep.write(out_dir / "report.md")
