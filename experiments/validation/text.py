"""The validation report as printed: the metrics table (real, simulated, error; the
overhead-corrected variant's error beside it), then what explains the difference."""
from __future__ import annotations

from batchlab.experiments.validation.compare import target_legend
from batchlab.experiments.validation.numbers import drift_text, num, pct
from batchlab.experiments.validation.repeats_text import render_repeats
from batchlab.experiments.validation.validate import HEADLINE


def metrics_table(comp: dict) -> str:
    """One row per cell: real | sim | error | error of the other variants; a `*` marks
    an error over its target."""
    others = [v for v in comp["variants"] if v != HEADLINE]
    header = ["", "", "real", "sim", "error", *(f"{v} err" for v in others)]
    rows = [header]
    other_cells = {v: comp["variants"][v]["metrics"] for v in others}
    for i, c in enumerate(comp["metrics"]):
        unit = " (ms)" if c["key"].endswith("_ms") else ""
        mark = " !" if c.get("overloaded") else " *" if c["ok"] is False else "  " if c["ok"] else ""
        cells = [f"{c['metric']}{unit}", c["stat"] if c["stat"] != "value" else "",
                 num(c["real"]), num(c["sim"]), pct(c["error"]) + mark]
        for v in others:
            o = other_cells[v][i]
            cells.append(pct(o["error"]) + (" !" if o.get("overloaded") else " *" if o["ok"] is False
                                            else "  " if o["ok"] else ""))
        rows.append(cells)
    widths = [max(len(r[j]) for r in rows) for j in range(len(header))]
    lines = []
    for k, r in enumerate(rows):
        left = [r[0].ljust(widths[0]), r[1].ljust(widths[1])]
        lines.append("  ".join(left + [c.rjust(w) for c, w in zip(r[2:], widths[2:])]).rstrip())
        if k == 0:
            lines.append("-" * len(lines[0]))
    return "\n".join(lines)


def explanation(comp: dict) -> list[str]:
    st, div, pre = comp["steps"], comp["divergence"], comp["preemptions"]
    if st["identical"]:
        sched = f"the schedules coincide for all {st['real_steps']} steps"
    else:
        sched = (f"the schedules coincide for the first {st['coincide_prefix']} steps; "
                 f"{st['matched']} steps ({pct(st['matched_fraction'], False)} of real) did "
                 f"identical work in both")
    lines = [f"steps: real {st['real_steps']}, sim {st['sim_steps']}; {sched}"]
    if div["step"] is not None:
        lines.append(f"first divergence at step {div['step']}: {div['reason']}")
    de = st["duration_error"]
    m, a = de["matched"], de["all_real"]
    lines.append(f"per-step duration, profile vs measured: median APE {pct(m['median_ape'], False)}, "
                 f"p90 {pct(m['p90_ape'], False)} over {m['steps']} matched steps; over all "
                 f"{a['steps']} real steps {pct(a['median_ape'], False)} / {pct(a['p90_ape'], False)}, "
                 f"total time {pct(a['total_error'])}")
    lines.append("typical real step / profile (median ratio): decode-only "
                 f"{de['decode_only']['median_ratio']:.2f}, with prefill "
                 f"{de['with_prefill']['median_ratio']:.2f}, first step after an idle gap "
                 f"{de['after_idle']['median_ratio']:.2f} ({de['after_idle']['steps']} steps)")
    lines.append(f"preemptions: real {pre['real']['preemptions']} ({pre['real']['requests_preempted']} "
                 f"requests), sim {pre['sim']['preemptions']} ({pre['sim']['requests_preempted']} requests)")
    real = comp["real"]
    if real.get("cpu_share") is not None:
        others = real.get("others_cpu")
        lines.append(f"contention: the real run got {real['cpu_share']:.2f} of a CPU while busy (below 1: "
                     f"other processes took the core mid-step); other processes used "
                     + (f"{others:.2f} CPUs meanwhile" if others is not None else "? CPUs")
                     + f"; 1-min load average {real['loadavg_1min'][0]} -> {real['loadavg_1min'][1]}")
    o, fit = comp["outside_forward"], comp["overhead_fit"]
    lines.append(
        f"real run outside forward passes: input preparation {o['input_prep_s']:.2f} s "
        f"({pct(o['input_prep_share'], False)} of {o['wall_s']:.1f} s wall; inside step times, "
        f"priced by the profile), between steps {o['scheduler_overhead_s']:.2f} s "
        f"({pct(o['scheduler_overhead_share'], False)}; fitted {fit['per_step_ms']:.3f} ms + "
        f"{fit['per_seq_ms']:.4f} ms/seq per step, added in profile+overhead), idle {o['idle_s']:.2f} s")
    ms = comp.get("machine_speed") or {}
    if ms.get("factor") is not None:
        kc = ms.get("compute_factor")
        compute = (f"compute-bound steps ({ms['compute_steps']}): their FLOP terms took {kc:.3f} x "
                   f"the price" if kc is not None else
                   f"compute side not measured ({ms.get('compute_why', 'an older run')})")
        lines.append(f"machine speed (steady decode steps, {ms['steps']} of them): step time "
                     f"{ms['factor']:.3f} x the profile's price{drift_text(ms)}; {compute}; "
                     f"`normalised` scales the profile's memory side (window by window, where "
                     f"measured) and FLOP terms by these")
    else:
        lines.append(f"machine speed: not measured ({ms.get('why', 'no steady decode step')})")
    k = comp["speed_factor"]
    lines.append(f"machine speed during the run: real step times total {k['all']:.3f} x the profile's "
                 f"price of the same steps (decode-only steps {k['decode']:.3f}, steps with prefill "
                 f"{k['prefill']:.3f}: speed-scaled uses these two)")
    return lines


def heading(comp: dict) -> str:
    st = comp.get("stability") or {}
    runs = f"; real run {st['real']}, sim {st['sim']}" if st else ""
    return (f"[{comp['policy']}] real vs simulated ({HEADLINE}: "
            f"{comp['profile'].get('describe', 'profile')}{runs}); {target_legend()}")


def render(comp: dict) -> str:
    parts = [heading(comp), "", metrics_table(comp), "", *explanation(comp)]
    if comp.get("repeats"):
        parts += ["", render_repeats(comp["repeats"])]
    return "\n".join(parts)
