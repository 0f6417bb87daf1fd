"""What `batchlab validate` prints, whatever the source of the real runs (records.py).

Per cell: a heading (policy, where the runs are, how many, their stability and the
simulation's, each run's machine speed), the table of judged numbers (metric, the real
runs' median and spread, sim, error raw and normalised, verdicts raw / normalised), then
the diagnostic lines its source allows. After every cell: the totals over them, the
per-step test, and the step kinds (live runs).

Every line fits in WIDTH columns: a longer one wraps, its continuation indented."""
from __future__ import annotations

import math
import textwrap

from batchlab.experiments.machine_speed import DRIFT_WINDOW_S
from batchlab.experiments.machine_speed import describe as describe_speed
from batchlab.experiments.validation.metrics import POOL_NUMBERS, targets_text
from batchlab.experiments.validation.numbers import drifts, pct, speeds
from batchlab.experiments.validation.probe_speed import METHOD as PROBE_METHOD
from batchlab.experiments.validation.per_step import describe as describe_per_step
from batchlab.experiments.validation.verdicts import beyond_range
from batchlab.experiments.validation.records import (CellDiagnostics, DistributionTests, JudgedCell, KindRow,
                                                     ProfileInfo, Totals, Validation)

WIDTH = 120
TABLE_HEAD = f"{'metric':<22}{'real (median)':>14}{'spread':>9}{'sim':>11}{'error':>9}{'normalised':>12}  verdict"


def fit(line: str) -> str:
    """The line wrapped to WIDTH columns, continuation lines indented."""
    if len(line) <= WIDTH:
        return line
    return textwrap.fill(line, WIDTH, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)


def heading(c: JudgedCell) -> str:
    per_run = speeds([s.factor for s in c.machine_speed], [s.compute_factor for s in c.machine_speed], 2)
    real = ", ".join("-" if v is None else v for v in c.stability.real)
    return (f"[{c.policy}] {c.where}: {c.runs} real run(s) ({real}; sim {c.stability.sim}); "
            f"machine speed (memory/compute) per run: {per_run}")


def _float(x: float | None) -> float:
    return math.nan if x is None else x


def table(c: JudgedCell) -> list[str]:
    """The judged numbers (those with a target; comparison.json has every one)."""
    lines = [TABLE_HEAD]
    for m in c.metrics:
        if m.target is None:
            continue
        verdict = m.verdict if m.verdict_normalised is None else f"{m.verdict} / {m.verdict_normalised}"
        lines.append(f"{m.label:<22}{_float(m.spread.median):>14.2f}{pct(m.spread.range, False):>9}"
                     f"{_float(m.sim):>11.2f}{pct(m.error):>9}{pct(m.error_normalised):>12}  {verdict}")
    return lines


def render_cell(c: JudgedCell) -> str:
    return "\n".join(fit(line) for line in [heading(c), *table(c), *diagnostic_lines(c)])


def diagnostic_lines(c: JudgedCell) -> list[str]:
    d = c.diagnostics
    if d is None:
        return []
    first = " (first real run)" if c.runs > 1 else ""
    lines = []
    if d.steps is not None:
        st = d.steps
        sched = (f"the schedules coincide for all {st.real_steps} steps" if st.identical else
                 f"the schedules coincide for the first {st.coincide_prefix} steps; {st.matched} steps "
                 f"({pct(st.matched_fraction, False)} of real) did identical work in both")
        lines.append(f"steps{first}: real {st.real_steps}, sim {st.sim_steps}; {sched}")
    if d.divergence is not None and d.divergence.step is not None:
        lines.append(f"first divergence at step {d.divergence.step}: {d.divergence.reason}")
    if d.step_error is not None:
        e = d.step_error
        lines.append(f"per-step duration{first}, profile vs measured: median APE {pct(e.median_ape, False)}, "
                     f"p90 {pct(e.p90_ape, False)} over all {e.steps} real steps, total time {pct(e.total_error)}")
    lines += _pool_lines(c) + _speed_lines(d) + _contention(d)
    if d.distributions:
        lines += ["", *_tests(d.distributions)]
    if c.runs > 1:
        far = [f"{m.label} ({pct(beyond_range(m.sim, m.spread), False)} beyond)" for m in c.metrics
               if m.verdict == "miss" and beyond_range(m.sim, m.spread) > _float(m.target)]
        if far:
            lines.append("missed whatever the real runs' spread (the simulation lies outside their range by "
                         "more than the target): " + ", ".join(far))
        lines.append("this hardware cannot decide (the real runs disagree with each other more than the "
                     "target, or the test rejects between real runs): " + ", ".join(d.undecidable)
                     if d.undecidable else
                     "every judged number is decidable here: the real runs agree within its target")
    return lines


def _pool_lines(c: JudgedCell) -> list[str]:
    """A prefill/decode cell's hand-off, measured against its price, and decode queue
    (reported, not judged); none for other cells."""
    keys = {n.key for n in POOL_NUMBERS}
    rows = [m for m in c.metrics if m.key in keys]
    return [f"{m.label} (not judged): real {_float(m.spread.median):.3f} ms (spread "
            f"{pct(m.spread.range, False)}), sim {_float(m.sim):.3f} ms, error {pct(m.error)}" for m in rows]


def _speed_lines(d: CellDiagnostics) -> list[str]:
    if not d.speeds:  # no step table: an endpoint
        return ["from an endpoint only request timings are seen: no machine speed, normalised variant, "
                "step matching or per-step test (those need the server's step table); queueing delay "
                "is not observable"]
    if all(s.method == PROBE_METHOD for s in d.speeds):
        return _probe_lines(d.speeds)
    lines = []
    moved = drifts([s.drift for s in d.speeds])
    if moved:
        lines.append(f"machine speed moving within each run by {moved} (p10-p90 of its {DRIFT_WINDOW_S:g} s "
                     f"windows, of its mean): the normalised simulation follows it on the memory side")
    missing = [f"run {i} ({s.why})" for i, s in enumerate(d.speeds, 1) if s.factor is None]
    if missing:
        lines.append("machine speed not measured: " + ", ".join(missing))
    lines += [f"machine speed of run {i} ({s.factor:.3f}) from {describe_speed(s)}"
              for i, s in enumerate(d.speeds, 1) if s.factor is not None]
    return lines


def _probe_lines(probed) -> list[str]:
    """An endpoint's replays, levelled by the speed probes around each (probe_speed.py)."""
    levels = ", ".join("-" if s.factor is None else f"{s.factor:.3f}" for s in probed)
    apart = max((s.spread for s in probed if s.spread is not None), default=None)
    lines = [f"machine speed per replay ({levels}) from an {PROBE_METHOD}; the probes around a replay "
             f"differ by up to {pct(apart, False)}"]
    missing = [f"replay {i} ({s.why})" for i, s in enumerate(probed, 1) if s.factor is None]
    return lines + (["machine speed not measured: " + ", ".join(missing)] if missing else [])


def _contention(d: CellDiagnostics) -> list[str]:
    runs = [r for r in d.runs if r.cpu_share is not None]
    if not runs:
        return []
    each = ", ".join(f"{r.cpu_share:.2f}/" + ("-" if r.others_cpu is None else f"{r.others_cpu:.2f}")
                     + (f" (load {r.loadavg_1min[0]} -> {r.loadavg_1min[1]})" if r.loadavg_1min else "")
                     for r in runs)
    return [f"contention per run (CPU share while busy, below 1: others took the core mid-step / other "
            f"processes' CPUs meanwhile): {each}"]


def _table(header: list[str], rows: list[list[str]], left: int = 1) -> list[str]:
    widths = [max(len(r[j]) for r in [header, *rows]) for j in range(len(header))]
    out = []
    for k, r in enumerate([header, *rows]):
        cells = [c.ljust(w) if j < left else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))]
        out.append("  ".join(cells).rstrip())
        if k == 0:
            out.append("-" * len(out[0]))
    return out


def _p(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.3f}"


def _tests(tests: list[DistributionTests]) -> list[str]:
    header = ["", "KS D", "KS p", "KS p real-real", "decides", "TOST ratio", "TOST p", "TOST p real-real",
              "decides"]
    rows = []
    for d in tests:
        rr_ks = [t.p for t in d.real_vs_real_ks if t.p is not None and math.isfinite(t.p)]
        rr_tost = [t.p for t in d.real_vs_real_tost if t.p is not None and math.isfinite(t.p)]
        rows.append([d.metric, _p(d.ks.statistic), _p(d.ks.p), _p(min(rr_ks) if rr_ks else None),
                     "yes" if d.ks_decides else "no", _p(d.tost.ratio), _p(d.tost.p),
                     _p(max(rr_tost) if rr_tost else None), "yes" if d.tost_decides else "no"])
    legend = ("KS: two-sample Kolmogorov-Smirnov, sim vs the pooled real runs (p < 0.05: different); TOST: "
              "the geometric means within +-10% (p < 0.05: equivalent); real-real: the lowest KS p and the "
              "highest TOST p between two real runs; a test decides only where it passes between the real "
              "runs themselves")
    return [legend, *_table(header, rows)]


def totals_line(t: Totals, scope: str, normalised: bool = True) -> str:
    """The totals over every cell judged; normalised False: no run had steps to normalise by."""
    v, vn = t.verdicts, t.verdicts_normalised
    return (f"over {scope}: within target raw {t.within}/{t.judged}"
            + (f", normalised {t.within_normalised}/{t.judged_normalised}" if normalised else "")
            + f"; the simulation faster in {t.faster} of {t.latency} latency numbers"
            + (f" (normalised {t.faster_normalised} of {t.latency_normalised})" if normalised else "")
            + f"; verdicts raw {v.ok} ok, {v.miss} miss, {v.undecidable} undecidable, {v.overloaded} overloaded"
            + (f"; normalised {vn.ok} ok, {vn.miss} miss" if normalised else "")
            + f" (targets: {targets_text()})")


def kinds_lines(kinds: list[KindRow]) -> list[str]:
    def share(x: float | None) -> str:
        return "-" if x is None or not math.isfinite(x) else f"{x * 100:.1f}%"
    rows = [[k.kind, str(k.steps), _p(k.ratio), _p(k.ratio_normalised), share(k.ape), share(k.ape_normalised)]
            for k in kinds]
    return ["step kinds (every real step, first match; median measured time over the profile's price, raw "
            "and at the run's machine speed, and the median |error| of each):",
            *_table(["step kind", "steps", "measured / profile", "normalised", "|error| raw", "|error| normalised"],
                    rows)]


def profile_line(p: ProfileInfo) -> str:
    held = "-" if p.heldout_median_ape_pct is None else f"{p.heldout_median_ape_pct:.1f}%"
    return f"profile judged: {p.describe} ({p.source}; held-out median APE of its fit {held})"


def render_end(v: Validation, scope: str) -> str:
    """After the cells of a live source: the totals, the per-step test, the step kinds."""
    normalised = any(m.verdict_normalised is not None for c in v.cells for m in c.metrics)
    lines = [totals_line(v.totals, scope, normalised)]
    if v.per_step is not None:
        lines.append(describe_per_step(v.per_step))
    if v.step_kinds:
        lines += ["", *kinds_lines(v.step_kinds)]
    return "\n".join(fit(line) for line in lines)


def render_stored(v: Validation, directories: int) -> str:
    """`validate --real`: every cell, then the totals and the per-step test."""
    cells = "\n\n".join(render_cell(c) for c in v.cells)
    return f"{cells}\n\n{render_end(v, f'{len(v.cells)} policies of {directories} stored validation(s)')}"
