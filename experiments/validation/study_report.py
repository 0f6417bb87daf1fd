"""The validation study's tables in markdown: the error of the headline simulation per
cell (misses marked), the real-vs-real spread next to it, and the diagnostics that
explain the misses."""
from __future__ import annotations

import math

import numpy as np

from batchlab.experiments.markdown import Report, fmt
from batchlab.experiments.validation.compare import STAT_TARGET, THROUGHPUT_TARGET

METRICS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2E"))
STATS = (("mean", "mean"), ("median", "p50"), ("p90", "p90"), ("p99", "p99"))


def _err(v: float | None, target: float | None = None) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    miss = target is not None and abs(v) > target
    text = f"{v * 100:+.1f}"
    return f"**{text}**" if miss else text


def error_table(rep: Report, rows: list[dict], prefix: str, mark: bool = True) -> None:
    heads = ["cell", "policy"] + [f"{m} {s}" for _, m in METRICS for _, s in STATS] + ["thr.", "worst"]
    body = []
    for r in rows:
        if r.get(f"{prefix}worst") is None:
            continue
        cells = [r["cell"], r["policy"]]
        for stem, _ in METRICS:
            for stat, _ in STATS:
                cells.append(_err(r.get(f"{prefix}{stat}_{stem}"), STAT_TARGET[stat] if mark else None))
        cells.append(_err(r.get(f"{prefix}request_throughput"), THROUGHPUT_TARGET if mark else None))
        cells.append(_err(r.get(f"{prefix}worst")))
        body.append(cells)
    rep.table(heads, body)


def diagnostics_table(rep: Report, rows: list[dict]) -> None:
    heads = ["cell", "policy", "CPU share", "others' CPUs", "speed dec./pref.", "steps real/sim", "coincide", "identical work", "step APE p50/p90",
             "step time total", "real/profile dec. / pref. / after idle", "preempt. real/sim",
             "gap ms/step",
             "worst +ovh", "worst speed-scaled", "worst self-fit", "worst real-vs-real"]
    body = [[r["cell"], r["policy"], fmt(r.get("cpu_share"), "{:.2f}"), fmt(r.get("others_cpu"), "{:.2f}"),
             f"{fmt(r.get('speed_decode'), '{:.2f}')} / {fmt(r.get('speed_prefill'), '{:.2f}')}",
             f"{r['steps_real']}/{r['steps_sim']}",
             fmt(r["first_divergence"], "{:.0f}") if r["first_divergence"] is not None else "all",
             fmt(r["matched_fraction"], "{:.0%}"),
             f"{fmt(r['step_ape_median'], '{:.1%}')} / {fmt(r['step_ape_p90'], '{:.1%}')}",
             _err(r["step_total_error"]) + "%",
             " / ".join(fmt(r.get(k), "{:.2f}") for k in ("ratio_decode", "ratio_prefill",
                                                          "ratio_after_idle")),
             f"{r['preempt_real']}/{r['preempt_sim']}", fmt(r["gap_ms_per_step"], "{:.2f}"),
             _err(r["ovh_worst"]), _err(r.get("speed_worst")), _err(r["self_worst"]),
             _err(r.get("spread_worst"))]
            for r in rows]
    rep.table(heads, body)


def summary_counts(rows: list[dict], prefix: str = "err_") -> dict[str, float]:
    """Over all rows: how many targeted numbers meet their target, and the median |error|."""
    ok, errs = 0, []
    for r in rows:
        for key, target in [(f"{s}_{m}", STAT_TARGET[s]) for m, _ in METRICS for s, _ in STATS] + [
                ("request_throughput", THROUGHPUT_TARGET)]:
            v = r.get(f"{prefix}{key}")
            if v is not None and math.isfinite(v):
                errs.append(abs(v))
                ok += abs(v) <= target
    return {"ok": ok, "total": len(errs), "median_abs": float(np.median(errs)) if errs else math.nan}


def summary_line(rows: list[dict]) -> str:
    """Targets met and median |error| per variant, and for the repeated real runs."""
    parts = []
    for prefix, name in (("err_", "profile (headline)"), ("ovh_", "profile+overhead"),
                         ("speed_", "speed-scaled"), ("self_", "self-fit"), ("spread_", "real vs real")):
        c = summary_counts(rows, prefix)
        if c["total"]:
            parts.append(f"{name}: {c['ok']}/{c['total']} within target, median |error| "
                         f"{c['median_abs'] * 100:.1f}%")
    return "; ".join(parts)


def render(result: dict) -> Report:
    rows = result["rows"]
    rep = Report("Validation study: simulator vs real backend")
    p = result["profile"]
    rep.para(f"Model {result['model']} on the CPU backend, {result['threads']} torch thread, "
             f"{result['seats']} seats, KV pool {result['kv_memory']}; policies "
             + ", ".join(f"{k} (max_num_batched_tokens {v['max_num_batched_tokens']})"
                         for k, v in result["policies"].items())
             + f". Profile: {p['describe']} ({p['source']}; held-out median APE of its fit "
               f"{fmt(p.get('heldout_median_ape_pct'), '{:.1f}')}%). Study wall time "
               f"{result['elapsed_s'] / 60:.1f} min.")
    rep.para("Relative error (sim - real) / real in %, headline simulation (the profile "
             "alone); **bold** = over target (5% mean/p50/p90 and throughput, 10% p99).")
    rep.para(f"Targeted numbers (TTFT, TPOT, E2E at mean/p50/p90/p99, throughput): "
             f"{summary_line(rows)}.")
    error_table(rep, rows, "err_")
    spread = [r for r in rows if r.get("spread_worst") is not None]
    if spread:
        rep.heading("Real vs real: the same workload served twice", 3)
        rep.para("Second real run against the first, same error definition: the simulator "
                 "cannot be judged more precisely than this.")
        error_table(rep, spread, "spread_", mark=False)
    if any(r.get("speed_worst") is not None for r in rows):
        rep.heading("Diagnostic: the profile scaled to the machine's speed during each run", 3)
        rep.para("Same table for the speed-scaled variant (the profile times the real run's "
                 "measured decode and prefill speed factors, plus its between-step time): what "
                 "the simulator gets right once the step-time level is right. Not a prediction: "
                 "the factors come from the run it is compared with.")
        error_table(rep, rows, "speed_")
    rep.heading("Diagnostics", 3)
    rep.para("CPU share: CPU time the real run's process got over its busy wall time (below 1: "
             "other processes took the core mid-step); others' CPUs: CPU time other processes "
             "used meanwhile, in CPUs (they share the memory bus and caches); speed: the real "
             "run's total step time over the profile's price of the same steps, decode-only "
             "steps / steps with prefill; coincide: steps before the schedules first differ; identical work: share of real "
             "steps that some simulated step repeats exactly; step APE over those matched steps "
             "(profile vs measured); real/profile: median ratio of measured to predicted step "
             "time for decode-only steps, steps with prefill, and the first step after an idle "
             "gap (> 2 ms); step time total: error of the profile on the sum of all "
             "real step times; gap: measured time between steps while busy; worst +ovh / "
             "speed-scaled / self-fit: worst targeted error with the between-step time added / "
             "and the profile scaled by the speed factor / with a linear cost model fitted to "
             "the run itself (diagnostics that see the real run).")
    diagnostics_table(rep, rows)
    for r in rows:
        if r["misses"]:
            rep.para(f"`{r['cell']}` {r['policy']}: first divergence: {r['divergence']}")
    return rep
