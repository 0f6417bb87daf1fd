"""Claim 2: with 8 seats and replies of very different lengths (many ~12-40 tokens, one
~500 in every 8), static batching's slot utilisation collapses while continuous batching
keeps the seats busy; throughput and queueing delay side by side.

Plan: 32 users in a closed loop, every group of 8 requests with one long reply. Simulated:
llama-3-8b on an A100 under static, continuous and chunked scheduling, with each seat's
holder recorded. --backend: a reduced version (short prompts) served by batchlab-tiny on
the CPU torch backend, next to the simulation of the identical request list."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.core.config import SchedulerConfig
from batchlab.core.kv import blocks_for
from batchlab.core.result import RunResult
from batchlab.core.summary import per_request_latencies
from batchlab.core.workload import Workload
from batchlab.experiments import figures as fg
from batchlab.experiments.markdown import table_of
from batchlab.experiments.studies.common import BUSY, Progress, RowLog, command_line, pick, preset, setup_line
from batchlab.experiments.studies.output import StudyRun, register_study
from batchlab.experiments.studies.seats import SeatTracker, utilisation_over_time
from batchlab.experiments.studies.templates import template
from batchlab.sim import simulate

NAME = "static-vs-continuous"
POLICIES = ("static", "continuous", "chunked")
SHORT, LONG, PROMPT = (12, 40), (480, 520), (64, 192)
MODEL, HARDWARE, SEED = "llama-3-8b", "a100-80gb", 0
PARAMS = {
    "full": dict(requests=512, users=32, seats=8, timeline_steps=700),
    "small": dict(requests=128, users=32, seats=8, timeline_steps=300),
}
COLUMNS = ("policy", "slot_utilization", "time_weighted_utilization", "seat_occupancy",
           "output_throughput", "request_throughput", "median_queueing_delay_ms",
           "p99_queueing_delay_ms", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
           "median_e2el_ms", "num_steps", "completed")
# The backend's short prompts keep prefills cheap on the CPU, so the run is about seats,
# not prompts; "small" scales the long reply to ~200 tokens to fit a test's time.
BACKEND_PROMPT, BACKEND_BLOCK = (16, 48), 16
BACKEND_PARAMS = {
    "full": dict(requests=128, users=32, seats=8, long=(480, 520), timeline_steps=1500),
    "small": dict(requests=32, users=32, seats=8, long=(190, 210), timeline_steps=600),
}
BACKEND_COLUMNS = ("world", "policy", "slot_utilization", "steady_utilization", "time_weighted_utilization",
                   "seat_occupancy", "output_throughput", "request_throughput", "median_queueing_delay_ms",
                   "p99_queueing_delay_ms", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
                   "decode_step_ms", "prefill_time_share", "num_steps", "duration_s", "completed",
                   "slowdown", "reference_speed_throughput")


def one_long_per_group(n: int, seats: int, users: int, seed: int = SEED,
                       long: tuple[int, int] = LONG, prompt_len: tuple[int, int] = PROMPT) -> Workload:
    """n requests; in every consecutive group of `seats`, exactly one long reply at a
    random place, the others short. Closed loop: `users` requests in flight."""
    rng = np.random.default_rng(seed)
    out = rng.integers(SHORT[0], SHORT[1] + 1, n)
    groups = n // seats
    where = seats * np.arange(groups) + rng.integers(0, seats, groups)
    out[where] = rng.integers(long[0], long[1] + 1, groups)
    prompt = rng.integers(prompt_len[0], prompt_len[1] + 1, n)
    desc = [f"{n} requests, replies {SHORT[0]}-{SHORT[1]} tokens except one of "
            f"{long[0]}-{long[1]} in every {seats}, prompts {prompt_len[0]}-{prompt_len[1]} "
            f"tokens, seed {seed}",
            f"closed loop: {users} users, each sends its next request when its reply ends"]
    return Workload(np.zeros(n), prompt, out, max_concurrency=users, description=desc)


def static_expectation(out_len: np.ndarray, seats: int) -> float:
    """Static's step-averaged utilisation if batches are consecutive groups of `seats`:
    a batch runs max(L) steps and its members fill sum(L) seat-steps."""
    g = out_len[: len(out_len) // seats * seats].reshape(-1, seats)
    return float(g.sum() / (seats * g.max(axis=1).sum()))


# -- simulation ------------------------------------------------------------------------

def _simulate(out_dir: Path, p: dict, progress: Progress) -> tuple[dict, list[fg.Figure]]:
    cost, blocks, meta, _ = preset(MODEL, HARDWARE)
    seats = p["seats"]
    w = one_long_per_group(p["requests"], seats, p["users"])
    long_ids = frozenset(np.flatnonzero(w.output_len >= LONG[0]).tolist())
    runs, trackers = {}, {}
    with RowLog(out_dir / "results.csv", COLUMNS) as log:
        for policy in POLICIES:
            tracker = SeatTracker(seats, p["timeline_steps"])
            res = simulate(w, SchedulerConfig(policy=policy, max_num_seqs=seats), cost, blocks,
                           meta=meta, observer=tracker)
            s, st = res.summary(), res.steps
            row = log.add({"policy": policy, **{k: s[k] for k in COLUMNS if k in s},
                           "time_weighted_utilization": float((st["num_seqs"] * st["duration_s"]).sum()
                                                              / (seats * st["duration_s"].sum())),
                           "seat_occupancy": tracker.occupancy})
            runs[policy], trackers[policy] = res, tracker
            progress(f"{policy}: slot utilisation {row['slot_utilization']:.1%}, "
                     f"{row['output_throughput']:.0f} output tokens/s")
        rows = {r["policy"]: r for r in log.rows}
    result = {"setup": setup_line(meta), "workload": w.describe(),
              "static_expected_utilization": static_expectation(w.output_len, seats), "policies": rows}
    return result, _figures(runs, trackers, long_ids, seats)


def _figures(runs: dict, trackers: dict, long_ids: frozenset[int], seats: int) -> list[fg.Figure]:
    timeline = []
    for policy in ("static", "continuous"):
        holders, ran = trackers[policy].grid()
        u = runs[policy].summary()["slot_utilization"]
        timeline.append(fg.Panel([fg.SeatGrid(holders, ran, long_ids, f"{policy} batching "
                                              f"(slot utilisation over the whole run {u:.0%})")]))
    timeline[-1].xlabel, timeline[-1].legend = "engine step", fg.SeatLegend()

    over_time = fg.Panel(xlabel="simulated time (s)", ylabel="seats computing (%)", ylim=(0, 105),
                         grid=fg.Grid(), legend=fg.Legend())
    for policy, res in runs.items():
        st = res.steps
        t_end = st["start_s"][-1] + st["duration_s"][-1]
        # 40 bins per run: static's batches (~6 s each) would alias with finer ones.
        t, u = utilisation_over_time(st["start_s"], st["duration_s"], st["num_seqs"], seats, t_end / 40)
        over_time.marks.append(fg.Line(t, 100 * u, label=policy, color=fg.color(policy)))

    s = {p: r.summary() for p, r in runs.items()}
    names = list(s)
    bars = [fg.Panel([fg.Bars(names, [s[n]["output_throughput"] for n in names], "output throughput",
                              "tokens/s")]),
            fg.Panel([fg.Bars(names, [s[n]["median_queueing_delay_ms"] / 1000 for n in names],
                              "queueing delay p50", "seconds", "{:.1f}")]),
            fg.Panel([fg.Bars(names, [s[n]["p99_queueing_delay_ms"] / 1000 for n in names],
                              "queueing delay p99", "seconds", "{:.1f}")])]

    cdfs = [fg.Panel(xlabel="queueing delay (s, log)", legend=fg.Legend()),
            fg.Panel(xlabel="end-to-end latency (s, log)", legend=fg.Legend())]
    for policy, res in runs.items():
        lat = per_request_latencies(res.requests)
        cdfs[0].marks.append(fg.Cdf(lat["queue"], policy, fg.color(policy)))
        cdfs[1].marks.append(fg.Cdf(lat["e2el"], policy, fg.color(policy)))
    return [
        fg.Figure("seat_timeline.png", timeline, 2, 1, "Seat timeline: who holds each of the 8 seats "
                  "at each step", width=11, height=2.6, sharex=True),
        fg.Figure("utilisation_over_time.png", [over_time], 1, 1,
                  "Slot utilisation over time (time-weighted, 8 seats)", width=9, height=3.6),
        fg.Figure("throughput_queueing.png", bars, 1, 3, "Throughput and queueing delay, side by side",
                  width=4.2, height=3.6),
        fg.Figure("latency_cdf.png", cdfs, 1, 2, "Latency CDFs", width=5.5, height=3.8)]


# -- the real backend (--backend) --------------------------------------------------------

def _measure(world: str, policy: str, res: RunResult, tracker: SeatTracker, seats: int,
             slowdown: float = 1.0) -> dict:
    """slowdown: how much longer the run's decode steps took than the reference steps timed
    before it (1 for the simulation); output tokens/s times it are what the run would
    have served with the CPU to itself, which policies run at different moments compare."""
    from batchlab.experiments.studies.common_backend import decode_step_ms  # lazy: torch (the --backend half)
    s, st, req = res.summary(), res.steps, res.requests
    dur, used = st["duration_s"], st["num_seqs"] / seats
    # Steady state: steps before the last request was admitted. After it, seats can only
    # empty (the run's drain), which weighs more in a short run than in the simulation's.
    steady = st["start_s"] < np.nanmax(req["first_scheduled_s"])
    prefill = st["prefill_tokens"] > 0
    return {"world": world, "policy": policy, **{k: s[k] for k in BACKEND_COLUMNS if k in s},
            "steady_utilization": float(used[steady].mean()) if steady.any() else float("nan"),
            "time_weighted_utilization": float((used * dur).sum() / dur.sum()),
            "seat_occupancy": tracker.occupancy, "decode_step_ms": decode_step_ms(st),
            "prefill_time_share": float(dur[prefill].sum() / dur.sum()),
            "num_steps": len(dur), "duration_s": float(st["start_s"][-1] + dur[-1] - st["start_s"][0]),
            "slowdown": slowdown, "reference_speed_throughput": s["output_throughput"] * slowdown}


def _serve(out_dir: Path, size: str, progress: Progress) -> tuple[dict, list[fg.Figure]]:
    """Each policy served once by batchlab-tiny on the CPU, then simulated on the same
    requests and KV pool. Needs torch and transformers."""
    # lazy: torch (the --backend half)
    from batchlab.experiments.studies.common_backend import (MODEL as REAL_MODEL, machine, serve, slowdown,
                                                             speed_reference, unless_busy)
    p = pick(BACKEND_PARAMS, size)
    seats = p["seats"]
    w = one_long_per_group(p["requests"], seats, p["users"], long=p["long"], prompt_len=BACKEND_PROMPT)
    long_ids = frozenset(np.flatnonzero(w.output_len >= p["long"][0]).tolist())
    # Room for every seat's longest possible request: no preemption, as in the simulation.
    kv_blocks = seats * blocks_for(BACKEND_PROMPT[1] + p["long"][1], BACKEND_BLOCK)
    cost, _, meta, _ = preset(MODEL, HARDWARE, block_size=BACKEND_BLOCK)
    rows: dict[str, dict] = {}
    runs, trackers, same = {}, {}, {}
    reference, reruns = speed_reference(seats), 0
    with RowLog(out_dir / "backend.csv", BACKEND_COLUMNS) as log:
        for policy in POLICIES:
            cfg = SchedulerConfig(policy=policy, max_num_seqs=seats, block_size=BACKEND_BLOCK,
                                  num_kv_blocks=kv_blocks)

            def attempt() -> tuple[RunResult, SeatTracker, float]:
                tracker = SeatTracker(seats, p["timeline_steps"])
                res = serve(w, cfg, tracker)
                return res, tracker, slowdown(res.steps, reference)

            def busy(slow: float) -> None:
                progress(f"backend {policy}: steps x{slow:.2f} slower than the reference, the machine "
                         f"was busy: running it again")

            (res, tracker, slow), rerun = unless_busy(attempt, lambda a: a[2], busy)
            reruns += rerun
            real = log.add(_measure("real", policy, res, tracker, seats, slow))
            sim_tracker = SeatTracker(seats, 0)
            sim = simulate(w, cfg, cost, kv_blocks, meta=meta, observer=sim_tracker)
            rows[policy] = {"real": real, "sim": log.add(_measure("sim", policy, sim, sim_tracker, seats))}
            # The same scheduler, fed the same closed loop: do both worlds take the same steps?
            same[policy] = all(np.array_equal(res.steps[k], sim.steps[k])
                               for k in ("num_seqs", "prefill_tokens", "decode_tokens"))
            runs[policy], trackers[policy] = res, tracker
            progress(f"backend {policy}: slot utilisation {real['slot_utilization']:.1%} "
                     f"(simulated {rows[policy]['sim']['slot_utilization']:.1%}), "
                     f"{real['output_throughput']:.0f} output tokens/s, {real['duration_s']:.1f} s")
    figures = _backend_figures(runs, trackers, rows, long_ids, seats, REAL_MODEL)
    return {"size": size, "model": REAL_MODEL, "machine": machine(), "workload": w.describe(),
            "requests": len(w), "seats": seats,
            "long": p["long"], "kv_blocks": kv_blocks, "block_size": BACKEND_BLOCK,
            "static_expected_utilization": static_expectation(w.output_len, seats),
            "policies": rows, "same_schedule_as_sim": same, "reruns": reruns,
            "reference_ms": {k: v * 1000 for k, v in reference.items()},
            "files": ["backend.csv", *fg.filenames(figures)]}, figures


def _backend_figures(runs: dict, trackers: dict, rows: dict, long_ids: frozenset[int], seats: int,
                     model: str) -> list[fg.Figure]:
    shown = ("static", "continuous")
    grids = {pol: trackers[pol].grid() for pol in shown}
    # One time window for both panels: as much as both recorded timelines cover.
    edges = {}
    for pol in shown:
        st, n = runs[pol].steps, len(grids[pol][0])
        t = st["start_s"][:n] - st["start_s"][0]
        edges[pol] = np.append(t, t[-1] + st["duration_s"][n - 1])
    window = min(e[-1] for e in edges.values())
    timeline = []
    for pol in shown:
        holders, ran = grids[pol]
        keep = int(np.searchsorted(edges[pol], window, side="left"))
        u = rows[pol]["real"]["slot_utilization"]
        timeline.append(fg.Panel([fg.SeatGrid(
            holders[:keep], ran[:keep], long_ids,
            f"{pol} batching, real run (slot utilisation over the whole run {u:.0%})",
            x_edges=edges[pol][:keep + 1])], xlim=(0, window),
            xlabel="wall-clock time since the first step (s)"))
    timeline[-1].legend = fg.SeatLegend()

    names = list(rows)
    real = {n: rows[n]["real"] for n in names}
    over_time = fg.Panel(title="slot utilisation over time, real (time-weighted, 40 bins per run)",
                         xlabel="wall-clock time (s)", ylabel="seats computing (%)", ylim=(0, 105),
                         grid=fg.Grid(), legend=fg.Legend(fontsize=8))
    for pol, res in runs.items():
        st = res.steps
        t0 = st["start_s"][0]
        t_end = st["start_s"][-1] + st["duration_s"][-1] - t0
        t, u = utilisation_over_time(st["start_s"] - t0, st["duration_s"], st["num_seqs"], seats, t_end / 40)
        over_time.marks.append(fg.Line(t, 100 * u, label=pol, color=fg.color(pol)))
    panels = [
        fg.Panel([fg.GroupedBars(names, {
            "real, whole run": [100 * real[n]["slot_utilization"] for n in names],
            "simulated, whole run": [100 * rows[n]["sim"]["slot_utilization"] for n in names],
            "real, before the drain": [100 * real[n]["steady_utilization"] for n in names]},
            "slot utilisation (mean over steps)", "% of seats computing")]),
        fg.Panel([fg.Bars(names, [real[n]["output_throughput"] for n in names],
                          "output throughput, real", "tokens/s")]),
        fg.Panel([fg.GroupedBars(names, {
            "p50": [real[n]["median_queueing_delay_ms"] / 1000 for n in names],
            "p99": [real[n]["p99_queueing_delay_ms"] / 1000 for n in names]},
            "queueing delay, real", "seconds", "{:.1f}")]),
        over_time]
    return [fg.Figure("backend_seat_timeline.png", timeline, 2, 1, f"Real backend ({model}, CPU): who "
                      f"holds each of the {seats} seats, on the wall clock", width=11, height=2.6),
            fg.Figure("backend_comparison.png", panels, 2, 2,
                      f"Real backend ({model}, CPU) vs simulation, same requests", width=5.6, height=3.8)]


# -- the report --------------------------------------------------------------------------

RESULTS = (("policy", "policy", None), ("slot util.", "slot_utilization", "{:.1%}"),
           ("time-weighted", "time_weighted_utilization", "{:.1%}"),
           ("seats held", "seat_occupancy", "{:.1%}"), ("output tok/s", "output_throughput", "{:.0f}"),
           ("req/s", "request_throughput", "{:.2f}"),
           ("queueing p50 (s)", lambda x: x["median_queueing_delay_ms"] / 1000, "{:.2f}"),
           ("queueing p99 (s)", lambda x: x["p99_queueing_delay_ms"] / 1000, "{:.2f}"),
           ("TTFT p50 (s)", lambda x: x["median_ttft_ms"] / 1000, "{:.2f}"),
           ("TTFT p99 (s)", lambda x: x["p99_ttft_ms"] / 1000, "{:.2f}"),
           ("E2E p50 (s)", lambda x: x["median_e2el_ms"] / 1000, "{:.2f}"), ("steps", "num_steps", "{:.0f}"))
BACKEND_RESULTS = (("policy", "policy", None), ("world", "world", None),
                   ("slot util.", "slot_utilization", "{:.1%}"),
                   ("before drain", "steady_utilization", "{:.1%}"),
                   ("time-weighted", "time_weighted_utilization", "{:.1%}"),
                   ("seats held", "seat_occupancy", "{:.1%}"), ("output tok/s", "output_throughput", "{:,.0f}"),
                   ("queueing p50 (s)", lambda x: x["median_queueing_delay_ms"] / 1000, "{:.2f}"),
                   ("queueing p99 (s)", lambda x: x["p99_queueing_delay_ms"] / 1000, "{:.2f}"),
                   ("TTFT p99 (s)", lambda x: x["p99_ttft_ms"] / 1000, "{:.2f}"),
                   ("decode step (ms)", "decode_step_ms", "{:.1f}"),
                   ("prefill time", "prefill_time_share", "{:.0%}"), ("steps", "num_steps", None),
                   ("run (s)", "duration_s", "{:.1f}"))


def report(r: dict) -> str:
    """report.md from the study's result (live, or read back from study.json)."""
    rows = r["policies"]
    st, co, ch = rows["static"], rows["continuous"], rows["chunked"]
    tpl = template(NAME)
    backend = _backend_report(r["backend"], r) if r.get("backend") else tpl("backend-not-run")
    return tpl("report", command=command_line(NAME, r["size"], bool(r.get("backend"))),
               setup=r["setup"], workload=r["workload"], st=st, co=co, ch=ch,
               expected=r["static_expected_utilization"],
               throughput_ratio=co["output_throughput"] / st["output_throughput"],
               queueing_ratio=st["median_queueing_delay_ms"] / co["median_queueing_delay_ms"],
               table=table_of(({"policy": n, **x} for n, x in rows.items()), RESULTS),
               backend=backend) + "\n"


def _backend_report(b: dict, study: dict) -> str:
    rows, same = b["policies"], b["same_schedule_as_sim"]
    st, co, ch = (rows[p]["real"] for p in ("static", "continuous", "chunked"))
    sst, sco, sch = (rows[p]["sim"] for p in ("static", "continuous", "chunked"))
    tpl = template(NAME)
    schedule = (tpl("same-schedule") if all(same.values()) else
                tpl("different-schedule", policies=", ".join(p for p, ok in same.items() if not ok)))
    disturbance = "" if "reruns" not in b else tpl(  # study.json files from before it was timed
        "disturbance", b=b, busy=BUSY, st=st, co=co, ch=ch,
        reference_ratio=co["reference_speed_throughput"] / st["reference_speed_throughput"]).rstrip("\n")
    return tpl("backend", command=command_line(NAME, b["size"], True), b=b, disturbance=disturbance,
               sim_model=study["setup"].split(",")[0], hardware=HARDWARE,
               st=st, co=co, ch=ch, sst=sst, sco=sco, sch=sch, schedule=schedule,
               throughput_ratio=co["output_throughput"] / st["output_throughput"],
               sim_throughput_ratio=sco["output_throughput"] / sst["output_throughput"],
               co_queueing_s=co["median_queueing_delay_ms"] / 1000,
               st_queueing_s=st["median_queueing_delay_ms"] / 1000,
               step_ratio=co["decode_step_ms"] / st["decode_step_ms"],
               sim_step_ratio=sco["decode_step_ms"] / sst["decode_step_ms"],
               one_seq="shorter" if st["decode_step_ms"] < sst["decode_step_ms"] else "longer",
               eight_seqs="shorter" if co["decode_step_ms"] < sco["decode_step_ms"] else "longer",
               static_queues=("less" if st["median_queueing_delay_ms"] < sst["median_queueing_delay_ms"]
                              else "more"),
               table=table_of((x for both in rows.values() for x in both.values()), BACKEND_RESULTS))


@register_study(NAME, "claim 2: 8 seats, one ~500-token reply among short ones: slot utilisation, "
                "throughput and queueing delay of static vs continuous (and chunked); "
                "--backend serves a reduced workload on the CPU torch backend",
                PARAMS, _serve, report)
def run(study: StudyRun, p: dict) -> tuple[dict, list[fg.Figure]]:
    sim, figures = _simulate(study.out_dir, p, study.progress)
    return {**sim, "files": ["results.csv", *fg.filenames(figures)]}, figures
