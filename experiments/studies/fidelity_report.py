"""The fidelity study's report.md: the error tables (raw and normalised by each real
run's machine speed) with the verdict of every judged number, the real runs' own spread,
the distribution tests, the step kinds the profile misprices, the conditions of every
run and the CDF plots."""
from __future__ import annotations

import math

import numpy as np

from batchlab.experiments.machine_speed import DRIFT_WINDOW_S
from batchlab.experiments.markdown import Report, fmt
from batchlab.experiments.studies.common import command_line
from batchlab.experiments.studies.fidelity_plan import NAME
from batchlab.experiments.validation.per_step import describe as describe_per_step
from batchlab.experiments.validation.repeats import faster, verdict_counts, within
from batchlab.experiments.validation.repeats_text import drifts, speeds

COLUMNS = [(f"{s}_{m}_ms", f"{lab} {st}") for m, lab in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2E"))
           for s, st in (("mean", "mean"), ("median", "p50"), ("p90", "p90"), ("p99", "p99"))]
COLUMNS.append(("request_throughput", "thr."))
DRIFT_NOTED = 0.10  # a run whose speed moved more than this within it is counted in the summary
LEAN_LIMIT = 0.60  # issue 14: the simulation faster in no more than this share of the numbers
LEGEND = ("**bold**: over target (5% mean/p50/p90 and throughput, 10% p99); ~: undecidable "
          "(the real runs spread wider than the target); !: an overloaded run, not judged")


def _mark(err: float, verdict: str) -> str:
    if err is None or not math.isfinite(err):
        return "-"
    text = f"{err * 100:+.1f}"
    return {"miss": f"**{text}**", "undecidable": f"{text}~", "overloaded": f"{text}!"}.get(verdict, text)


def _by_key(cell: dict) -> dict:
    return {m["key"]: m for m in cell["metrics"]}


def error_table(rep: Report, cells: list[dict], field: str, verdict: str) -> None:
    body = []
    for c in cells:
        m = _by_key(c)
        body.append([c["workload"], c["policy"]] + [_mark(m[k][field], m[k][verdict]) for k, _ in COLUMNS])
    rep.table(["workload", "policy", *(lab for _, lab in COLUMNS)], body)


def spread_table(rep: Report, cells: list[dict]) -> None:
    body = []
    for c in cells:
        m = _by_key(c)
        body.append([c["workload"], c["policy"]]
                    + [fmt(m[k]["spread"]["range"] * 100, "{:.1f}") + ("" if m[k]["sim_inside"] else "*")
                       for k, _ in COLUMNS])
    rep.table(["workload", "policy", *(lab for _, lab in COLUMNS)], body)


def _test(t: dict, decides: bool, key: str) -> str:
    if not math.isfinite(t.get("p", math.nan)):
        return "-"
    return f"{t[key]:.2f} ({t['p']:.2g})" + ("" if decides else "†")


def tests_table(rep: Report, cells: list[dict]) -> None:
    heads, body = ["workload", "policy"], []
    for d in cells[0]["distributions"]:
        heads += [f"{d['metric']} KS D (p)", f"{d['metric']} TOST ratio (p)"]
    for c in cells:
        row = [c["workload"], c["policy"]]
        for d in c["distributions"]:
            row += [_test(d["ks"], d["ks_decides"], "statistic"), _test(d["tost"], d["tost_decides"], "ratio")]
        body.append(row)
    rep.table(heads, body)


def summary_para(cells: list[dict]) -> str:
    rows = [m for c in cells for m in c["metrics"]]
    raw, norm = verdict_counts(rows), verdict_counts(rows, "verdict_normalised")
    fast, lat = faster(rows, "error")
    fast_norm, lat_norm = faster(rows, "error_normalised")
    w_raw, n_raw = within(rows, "error", "verdict")
    w_norm, n_norm = within(rows, "error_normalised", "verdict_normalised")
    undecided = sorted({u for c in cells for u in c["undecidable"]})

    def line(t: dict) -> str:
        return (f"{t['ok']} ok, {t['miss']} miss, {t['undecidable']} undecidable, "
                f"{t['overloaded']} overloaded (not judged)")
    return (f"{drift_sentence(cells)}Judged numbers (TTFT, TPOT, E2E at mean/p50/p90/p99, "
            f"throughput), median error over the real runs: raw {line(raw)}; normalised "
            f"{line(norm)}. Within target regardless of the noise floor: raw {w_raw}/{n_raw}, "
            f"normalised {w_norm}/{n_norm}. The simulation predicts the faster run in {fast} of "
            f"{lat} latency numbers of stable runs (normalised: {fast_norm} of {lat_norm}). Numbers "
            f"this hardware could not decide in at least one cell: {', '.join(undecided) or 'none'}."
            f"{lean_sentence(fast_norm, lat_norm)}")


def lean_sentence(fast: int, latency: int) -> str:
    """Where the normalised simulation leans one way, what to do about it: across fidelity
    passes the lean moved with the profile far more than with the runs judged, and a profile
    refined on served runs of other times leaned neither way (docs/validation-history.md, "Pass 14")."""
    if not latency or (1 - LEAN_LIMIT) * latency <= fast <= LEAN_LIMIT * latency:
        return ""
    way = "faster" if fast > LEAN_LIMIT * latency else "slower"
    share = fast if way == "faster" else latency - fast
    return (f" Normalised, the simulation predicts the {way} run in {share} of {latency} latency "
            f"numbers, over issue 14's {LEAN_LIMIT * 100:.0f}%: on a shared machine a profile's shape "
            f"carries the moment it was calibrated in; refine it on these runs and others "
            f"(`batchlab calibrate --from-run cells/* ... --profile PROFILE --out refined.json`, "
            f"docs/calibration.md) and judge later runs with it.")


def drift_sentence(cells: list[dict]) -> str:
    """How far the machine's speed moved within the real runs (experiments.machine_speed.drift):
    what one factor per run cannot normalise."""
    drifts = [d for c in cells for d in c.get("speed_drift") or [] if d is not None]
    if not drifts:
        return ""
    big = sum(d > DRIFT_NOTED for d in drifts)
    return (f"Within each real run the machine's speed moved by a median {np.median(drifts) * 100:.0f}% "
            f"(p10-p90 of its steady decodes' level over {DRIFT_WINDOW_S:g} s windows, of the run's "
            f"mean; {big} of {len(drifts)} runs measured moved more than {DRIFT_NOTED * 100:.0f}%): "
            f"the normalised simulation follows it window by window on the memory side. ")


def kinds_table(rep: Report, kinds: list[dict]) -> None:
    rep.table(["step kind", "steps", "measured / profile", "normalised", "|error| raw", "|error| normalised"],
              [[k["kind"], k["steps"], fmt(k["ratio"], "{:.3f}"), fmt(k["ratio_normalised"], "{:.3f}"),
                fmt(k["ape"] * 100 if math.isfinite(k["ape"]) else math.nan, "{:.1f}%"),
                fmt(k["ape_normalised"] * 100 if math.isfinite(k["ape_normalised"]) else math.nan, "{:.1f}%")]
               for k in kinds])


def conditions_table(rep: Report, cells: list[dict]) -> None:
    rep.table(["workload", "policy", "real runs", "sim", "machine speed per run (memory/compute)",
               "its drift within each run", "CPU share (1st run)",
               "others' CPUs", "step APE p50", "step time total", "real wall (s)"],
              [[c["workload"], c["policy"], "/".join(c["stability"]["real"]), c["stability"]["sim"],
                speeds(c["machine_speed"], c.get("compute_speed"), 2),
                drifts(c.get("speed_drift")) or "-",
                fmt(c["cpu_share"], "{:.2f}"),
                fmt(c["others_cpu"], "{:.2f}"), fmt(c["step_ape_all"] * 100, "{:.1f}%"),
                fmt(c["step_total_error"] * 100, "{:+.1f}%"), fmt(c["real_wall_s"], "{:.1f}")]
               for c in cells])


def render(result: dict) -> Report:
    cells, p = result["cells"], result["profile"]
    rep = Report("Fidelity: the calibrated simulator against repeated real runs")
    rep.para(f"Command: `{command_line(NAME, result['size'])}`. {result['model']} on the CPU backend "
             f"({result['machine']}), {result['threads']} torch thread, {result['seats']} seats, KV pool "
             f"{result['kv_memory']}; {result['requests']} requests per workload, each cell's real side "
             f"served {result['repeats']} times. Profile: {p['describe']} ({p['source']}; held-out "
             f"median APE of its fit {fmt(p.get('heldout_median_ape_pct'), '{:.1f}')}%). Study wall "
             f"time {result['elapsed_s'] / 60:.1f} min. The real runs share the machine with whatever "
             f"else runs on it: CPU share and others' CPUs below say how much.")
    rep.table(["workload", "what", "options"],
              [[n, s["what"], f"`{s['options']}`"] for n, s in result["shapes"].items()])
    rep.para(summary_para(cells))
    if result.get("per_step"):
        rep.para(describe_per_step(result["per_step"]))
    rep.heading("Error, raw: (sim - real) / real in %, median over the real runs", 3)
    rep.para(LEGEND + ".")
    error_table(rep, cells, "error", "verdict")
    rep.heading("Error, normalised by each real run's machine speed", 3)
    rep.para("The profile at each real run's machine speed (experiments/machine_speed.py), simulated "
             "again and compared with that run: the profile's memory side (fixed costs, weight and "
             "KV traffic) x its steady decode steps' measured time over their price, and its FLOP "
             "terms x what its compute-bound steps took beyond their memory side over the FLOP "
             "terms' price. " + LEGEND + ".")
    error_table(rep, cells, "error_normalised", "verdict_normalised")
    rep.heading("Real vs real: spread of the real runs", 3)
    rep.para("(max - min) / median over the real runs, in %; * where the simulated value falls "
             "outside the real runs' range.")
    spread_table(rep, cells)
    rep.heading("Distribution tests: simulation against the pooled real runs", 3)
    rep.para("KS: two-sample Kolmogorov-Smirnov statistic (p-value; p < 0.05: the distributions "
             "differ). TOST: ratio of geometric means sim / real (p-value; p < 0.05: equivalent "
             "within +-10%). †: the test cannot decide here, because it fails between the real "
             "runs themselves (KS rejects, or TOST cannot show equivalence, for some pair).")
    tests_table(rep, cells)
    rep.heading("Step kinds the profile misprices", 3)
    rep.para("Every real step of every run, by kind (first match: after an idle gap > 2 ms; "
             "prefill-only; mixed prefill + decode; the decode step right after a prefill; "
             "steady decode); median measured time over the profile's price, and over its price "
             "at the run's machine speed as the normalised simulation prices each step, window by "
             "window where the run measured its drift (steady decode is near 1 by construction: "
             "its median a few per cent below, the level being total time over total price, "
             "which the slow steps pull up).")
    kinds_table(rep, result["step_kinds"])
    rep.heading("Conditions of the runs", 3)
    conditions_table(rep, cells)
    rep.heading("CDFs: simulation against the band of the real runs", 3)
    for c in cells:
        rep.image(f"cells/{c['workload']}/{c['policy']}/cdf_band.png", f"{c['workload']} {c['policy']}")
    return rep
