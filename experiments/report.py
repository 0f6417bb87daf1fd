"""The comparison table printed at the end of a run: one column per policy."""
from __future__ import annotations

import math
from pathlib import Path

from batchlab.core.class_summary import BREAKDOWNS
from batchlab.core.summary import SLO

# (summary key, label, format)
ROWS: list[tuple[str, str, str]] = [
    ("completed", "completed requests", "{:.0f}"),
    ("rejected", "rejected requests", "{:.0f}"),
    ("request_throughput", "throughput (req/s)", "{:.2f}"),
    ("output_throughput", "output tokens/s", "{:.0f}"),
    ("slot_utilization", "slot utilisation", "{:.1%}"),
    ("kv_utilization", "KV utilisation", "{:.1%}"),
    ("preemptions", "preemptions", "{:.0f}"),
    # A KV tier's runs only (core/kv_tiers/columns.py): what it moved, held and served
    ("kv_tier_swaps", "KV tier swaps", "{:.0f}"),
    ("kv_tier_recomputes", "KV tier recomputes", "{:.0f}"),
    ("kv_tier_bytes_out", "KV tier bytes out", "{:.3g}"),
    ("kv_tier_bytes_in", "KV tier bytes in", "{:.3g}"),
    ("kv_tier_prefix_hit_rate", "KV tier prefix hit rate", "{:.1%}"),
    ("kv_tier_occupancy_mean", "KV tier occupancy (mean)", "{:.1%}"),
    ("median_ttft_ms", "TTFT p50 (ms)", "{:.1f}"),
    ("p99_ttft_ms", "TTFT p99 (ms)", "{:.1f}"),
    ("median_tpot_ms", "TPOT p50 (ms)", "{:.2f}"),
    ("p99_tpot_ms", "TPOT p99 (ms)", "{:.2f}"),
    ("mean_acceptance_length", "acceptance length (mean)", "{:.2f}"),  # speculative runs only
    ("median_queueing_delay_ms", "queueing p50 (ms)", "{:.1f}"),
    ("p99_queueing_delay_ms", "queueing p99 (ms)", "{:.1f}"),
    ("median_e2el_ms", "E2E latency p50 (ms)", "{:.1f}"),
    ("p99_e2el_ms", "E2E latency p99 (ms)", "{:.1f}"),
    ("request_goodput", "goodput (req/s in SLO)", "{:.2f}"),
    ("stability", "queue (stability)", "{}"),
]


def _fmt(fmt: str, v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return fmt.format(v)


# Per class (priority, replica): the latency and goodput rows.
CLASS_ROWS: list[tuple[str, str, str]] = [
    ("completed", "completed requests", "{:.0f}"),
    ("median_ttft_ms", "TTFT p50 (ms)", "{:.1f}"),
    ("p99_ttft_ms", "TTFT p99 (ms)", "{:.1f}"),
    ("median_tpot_ms", "TPOT p50 (ms)", "{:.2f}"),
    ("median_queueing_delay_ms", "queueing p50 (ms)", "{:.1f}"),
    ("median_e2el_ms", "E2E latency p50 (ms)", "{:.1f}"),
    ("p99_e2el_ms", "E2E latency p99 (ms)", "{:.1f}"),
    ("request_goodput", "goodput (req/s in SLO)", "{:.2f}"),
]
_CLASS_TITLES = {"by_priority": "priority class", "by_replica": "replica"}


def comparison_table(summaries: dict[str, dict[str, float]], row_spec=ROWS) -> str:
    names = list(summaries)
    rows = [(label, [_fmt(fmt, summaries[n].get(key)) for n in names])
            for key, label, fmt in row_spec if any(key in summaries[n] for n in names)]
    return layout(names, rows)


def layout(header: list[str], rows: list[tuple[str, list[str]]]) -> str:
    """A text table: a label column, then right-aligned cells under `header`."""
    w0 = max(len(r[0]) for r in rows)
    widths = [max(len(h), *(len(r[1][i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda first, cells: "  ".join([first.ljust(w0), *(c.rjust(w) for c, w in zip(cells, widths))])
    out = [line("", header), line("", ["-" * w for w in widths])]
    out += [line(label, cells) for label, cells in rows]
    return "\n".join(out)


def class_tables(summaries: dict[str, dict]) -> str:
    """The per-class breakdowns (core/class_summary.py) a run's summaries carry: one
    table per class, a column per run ("-" where a run had no such class)."""
    out = []
    for key, title in _CLASS_TITLES.items():
        classes = sorted({c for s in summaries.values() for c in s.get(key, {})}, key=int)
        for c in classes:
            sub = {n: s.get(key, {}).get(c, {}) for n, s in summaries.items()}
            out.append(f"{title} {c}:\n" + comparison_table(sub, CLASS_ROWS))
    return "\n\n".join(out)


def slo_line(slo: SLO | None) -> str | None:
    """The objectives goodput counts against, printed with the table so none is hidden."""
    if slo is None:
        return None
    parts = [f"{label} <= {v:g} ms" for label, v in
             (("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms), ("E2E latency", slo.e2el_ms))
             if v is not None]
    return "goodput SLO: " + (", ".join(parts) if parts else "none (every finished request counts)")


def footer(slo: SLO | None, summaries: dict[str, dict] | None = None, out_dir: Path | None = None) -> str:
    """What follows a run's table (simulate, run): the SLO goodput counts against, the
    per-class tables where the summaries carry them, and where the results went."""
    parts = [slo_line(slo)] if slo is not None else []
    if summaries and any(k in s for s in summaries.values() for k in BREAKDOWNS):
        parts.append("\n" + class_tables(summaries))
    if out_dir:
        parts.append(f"\nresults written to {out_dir}/")
    return "\n".join(parts)
