"""Plain-text summaries of a profile: fit quality, fitted rates against the measured
roofline, and per-point errors."""
from __future__ import annotations

from core.batch import StepFeatures
from core.profile import Profile, RegionError


UNRESOLVED = 100.0  # a fitted rate this many times the machine's: its term is ~0


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


def rates_table(p: Profile) -> str:
    e, c = p.effective, p.cost

    def ratio(a: float | None, b: float | None) -> str:
        if a and b and a / b > UNRESOLVED:
            return "  (term ~0: not resolved by this grid)"
        return f"{a / b:6.2f}x" if a and b else "     -"

    def g(x: float | None, unit: float = 1e9) -> str:
        return f"{x / unit:8.1f}" if x and x < 1e18 else "     inf"

    lines = [f"fitted terms (form {c.combine!r}) vs the roofline measured in the same run",
             f"  weight-read bandwidth {g(e.mem_bandwidth)} GB/s   "
             f"{ratio(e.mem_bandwidth, e.measured_read_bandwidth)} of read "
             f"({(e.measured_read_bandwidth or 0) / 1e9:.1f} GB/s)"
             + ("  [pinned: sum form]" if c.combine == "sum" else ""),
             f"  KV-read bandwidth     {g(e.kv_bandwidth)} GB/s   "
             f"{ratio(e.kv_bandwidth, e.measured_copy_bandwidth)} of copy "
             f"({(e.measured_copy_bandwidth or 0) / 1e9:.1f} GB/s)",
             f"  matmul FLOP rate      {g(e.flop_rate)} GFLOP/s"
             f"{ratio(e.flop_rate, e.measured_matmul_flops)} of matmul "
             f"({(e.measured_matmul_flops or 0) / 1e9:.0f} GFLOP/s)",
             f"  attention FLOP rate   {g(e.attn_flop_rate)} GFLOP/s"
             f"{ratio(e.attn_flop_rate, e.measured_matmul_flops)} of matmul",
             f"  fixed overhead        {e.overhead_s * 1e3:8.2f} ms/step; per sequence "
             f"{c.per_seq_s * 1e3:.3f} ms; per prefill chunk {c.per_chunk_s * 1e3:.3f} ms",
             "  small-row corrections " + (", ".join(f"{i + 1} row(s) {v * 1e3:+.2f} ms"
                                                    for i, v in enumerate(c.small_rows)) or "none")]
    return "\n".join(lines)


def points_table(p: Profile) -> str:
    cost = p.cost_model()
    lines = [f"  {'point':<22}{'region':<9}{'measured ms':>12}{'spread':>8}{'model ms':>10}{'error':>8}"]
    for m in p.measurements or []:
        pred = cost.step_time(StepFeatures(**m.features))
        err = (pred - m.median_s) / m.median_s * 100
        tag = " held-out" if m.heldout else ""
        lines.append(f"  {m.point:<22}{m.region:<9}{m.median_s * 1e3:12.2f}"
                     f"{m.mad_s / m.median_s * 100:7.1f}%{pred * 1e3:10.2f}{err:+7.1f}%{tag}")
    return "\n".join(lines)
