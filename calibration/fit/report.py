"""Plain-text summaries of a profile: fit quality, fitted rates against the measured
roofline, and per-point errors."""
from __future__ import annotations

from batchlab.core.batch import StepFeatures
from batchlab.core.cost.profile import Profile, RegionError, UNRESOLVED_RATIO


# A fitted rate above the machine's measured peak by more than this is not physical: the
# grid did not pin its term down (timing noise, or too few points, as on --grid quick).
ABOVE_PEAK = 1.5


def _row(name: str, e: RegionError) -> str:
    if not e.n:
        return f"  {name:<16}{0:>4}        -         -"
    return f"  {name:<16}{e.n:>4} {e.median_ape:>7.2f}% {e.max_ape:>8.2f}%"


def fit_table(p: Profile) -> str:
    q = p.fit
    lines = ["fit quality (absolute % error of the fitted step time vs measured median)",
             f"  {'points':<16}{'n':>4} {'median':>8} {'max':>9}",
             _row("held-out, all", q.heldout)]
    lines += [_row(f"held-out, {r}", e) for r, e in q.regions.items()]
    lines.append(_row("training", q.train))
    if q.spread_median_pct is not None:
        lines.append(f"  repeat spread (median MAD/median of a point): {q.spread_median_pct:.2f}%")
    return "\n".join(lines)


def _rate(label: str, value: float | None, unit: str, measured: float | None, of: str) -> str:
    """One fitted rate against the measured one; an unresolved or non-physical fit says so
    instead of printing an infinite or impossible figure as if it were measured."""
    scale = 1e9  # GB/s, GFLOP/s
    ratio = value / measured if value and measured else None
    if value is None or (ratio is not None and ratio > UNRESOLVED_RATIO):
        return f"  {label:<22}not resolved by this grid (its term fitted to ~0)"
    line = f"  {label:<22}{value / scale:8.1f} {unit:<8}"
    if ratio is None:
        return line + "     -"
    line += f"{ratio:5.2f}x of {of}"
    if ratio > ABOVE_PEAK:
        line += "  [above the measured peak: not physical; the grid does not pin this term down]"
    return line


def rates_table(p: Profile) -> str:
    e, c = p.effective, p.cost
    read, copy, mm = e.measured_read_bandwidth, e.measured_copy_bandwidth, e.measured_matmul_flops

    def fmt(x: float | None, unit: str) -> str:
        return f"{x / 1e9:.1f} {unit}" if x else "?"

    weight = _rate("weight-read bandwidth", e.mem_bandwidth, "GB/s", read, f"read ({fmt(read, 'GB/s')})")
    if c.combine == "sum":
        weight += "  [pinned: sum form]"
    lines = [f"fitted terms (form {c.combine!r}) vs the roofline measured in the same run", weight,
             _rate("KV-read bandwidth", e.kv_bandwidth, "GB/s", copy, f"copy ({fmt(copy, 'GB/s')})"),
             _rate("matmul FLOP rate", e.flop_rate, "GFLOP/s", mm, f"matmul ({fmt(mm, 'GFLOP/s')})"),
             _rate("attention FLOP rate", e.attn_flop_rate, "GFLOP/s", mm, "matmul"),
             f"  fixed overhead        {e.overhead_s * 1e3:8.2f} ms/step; per sequence "
             f"{c.per_seq_s * 1e3:.3f} ms; per prefill chunk {c.per_chunk_s * 1e3:.3f} ms",
             "  small-row corrections " + (", ".join(f"{i + 1} row(s) {v * 1e3:+.2f} ms"
                                                    for i, v in enumerate(c.small_rows)) or "none")]
    if p.grid is not None and p.grid.name == "quick":
        lines.append("  (quick grid: a smoke test; these rates are not for use)")
    return "\n".join(lines + gpu_form_lines(p))


def gpu_form_lines(p: Profile) -> list[str]:
    """The GPU form's constants (core/cost/cpu_form.py), each with its standard error."""
    g = p.gpu_form
    if g is None:
        return []
    head = ("prices this profile" if p.form == "gpu" else "fitted too; the form above prices this profile")
    lines = [f"GPU form ({head}): over the measured read {g.read_bandwidth / 1e9:.1f} GB/s and matmul "
             f"{g.matmul_flops / 1e9:.0f} GFLOP/s"]
    for name, c in g:
        if hasattr(c, "stderr"):
            err = "pinned" if name in g.pinned else "-" if c.stderr is None else f"+- {c.stderr:.3g}"
            lines.append(f"  {name:<22}{c.value:12.4g}  {err}")
    return lines


def points_table(p: Profile) -> str:
    cost = p.cost_model().swept()  # a sweep point is timed after another shape, not steady
    lines = [f"  {'point':<22}{'region':<9}{'measured ms':>12}{'spread':>8}{'model ms':>10}{'error':>8}"]
    for m in p.measurements or []:
        pred = cost.step_time(StepFeatures(**m.features))
        err = (pred - m.median_s) / m.median_s * 100
        tag = " held-out" if m.heldout else ""
        lines.append(f"  {m.point:<22}{m.region:<9}{m.median_s * 1e3:12.2f}"
                     f"{m.mad_s / m.median_s * 100:7.1f}%{pred * 1e3:10.2f}{err:+7.1f}%{tag}")
    return "\n".join(lines)
