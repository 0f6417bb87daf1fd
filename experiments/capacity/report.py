"""What `batchlab capacity` prints and writes: the answer table (one row per policy or
candidate), the sensitivity rows, the criteria and assumptions, every point tried."""
from __future__ import annotations

import math
from pathlib import Path

from batchlab.experiments.capacity.binding import Binding, binding
from batchlab.experiments.capacity import sensitivity
from batchlab.experiments.capacity.plot import plot_answers
from batchlab.experiments.capacity.point import ASSUMED, COUNTS, Criteria
from batchlab.experiments.capacity.search import Answer
from batchlab.experiments.capacity.tables import text_table, write_rows
from batchlab.experiments.config import ExperimentConfig


def answer_binding(a: Answer, criteria: Criteria) -> Binding | None:
    """What binds the answer (None where nothing passed)."""
    if a.value is None or a.best is None:
        return None
    nxt, label = a.next_cheaper()
    return binding(a.best, nxt, criteria, label, "rate up" if a.kind == "max-rate" else "cheaper")


def answer_row(a: Answer, price: float | None, criteria: Criteria | None = None) -> dict:
    b = a.best or {}
    row = {"search": a.kind, "label": a.label, "answer": a.value,
           "met": a.value is not None, "error": a.error, "stopped": a.stopped}
    if a.kind == "max-rate":
        row["band_low"], row["band_high"] = a.band if a.band else (math.nan, math.nan)
        row["rate_scale"] = b.get("rate_scale", math.nan) if a.value is not None else math.nan
    row["gpus"] = b.get("gpus", math.nan) if a.value is not None else math.nan  # no answer: no count
    if price is not None:
        row["cost_per_hour"] = row["gpus"] * price if a.kind == "replicas" and a.value else math.nan
        if a.kind == "max-rate" and a.value:
            row["cost_per_hour"] = row["gpus"] * price
            row["cost_per_million_requests"] = row["cost_per_hour"] / (a.value * 3600) * 1e6
    for k in ("max_num_seqs", "max_num_batched_tokens", "output_throughput", "median_tpot_ms",
              "p99_ttft_ms", "p99_tpot_ms", "p99_e2el_ms",
              "slo_attainment", *COUNTS, "stability", "failures", *ASSUMED):
        row[k] = b.get(k)
    row["points_tried"] = len(a.points)
    bind = answer_binding(a, criteria) if criteria is not None else None
    if bind is not None:
        row.update({"tightest": bind.tightest, "tightest_headroom": bind.tightest_headroom,
                    "binds": bind.constraint, "binds_headroom": bind.headroom, "next_cheaper": bind.next_label,
                    "next_failure": bind.next_failure, "next_miss": bind.next_miss})
    return row


COLS = {
    "max-rate": [("label", "policy", "{}"), ("answer", "max rate (req/s)", "{:.2f}"),
                 ("band_low", "band low", "{:.2f}"), ("band_high", "band high", "{:.2f}"),
                 ("rate_scale", "x workload", "{:.3f}")],
    "replicas": [("label", "candidate", "{}"), ("answer", "replicas", "{:.0f}"), ("gpus", "GPUs", "{:.0f}")],
}
TAIL = [("p99_ttft_ms", "TTFT p99 (ms)", "{:.0f}"), ("p99_tpot_ms", "TPOT p99 (ms)", "{:.1f}"),
        ("slo_attainment", "in SLO", "{:.1%}"), ("rejected", "rejected", "{:.0f}"),
        ("too_long", "too long", "{:.0f}"),
        ("unfinished", "unfinished", "{:.0f}"), ("stability", "queue", "{}"), ("tightest", "tightest", "{}"),
        ("binds", "binds", "{}"),
        ("points_tried", "points", "{}")]


def render(kind: str, answers: list[Answer], sens: list[tuple], criteria: Criteria,
           cfg: ExperimentConfig, setups: dict, samples: list, price: float | None, where: str,
           seeds_vary: str = "") -> str:
    n_seeds = len({s.seed for s in samples})
    lines = [f"capacity {kind}: {criteria.describe()}",
             (f"workload: {cfg.workload.source} (rate x{cfg.workload.rate_scale:g}), {len(samples)} "
              f"sample(s) per point ({n_seeds} seed(s) x {len(samples) // n_seeds} window(s)"
              f"{'; ' + seeds_vary if seeds_vary else ''}); "
              f"router {cfg.run.router}; ran on {where}")]
    # One block of assumptions, or one per search where they differ (candidates).
    blocks = {label: s.assumptions() for label, s in setups.items() if s is not None}
    distinct = list(dict.fromkeys(tuple(b) for b in blocks.values()))
    for label, b in blocks.items():
        if len(distinct) > 1:
            lines.append(f"[{label}]")
        lines += b
        if len(distinct) == 1:
            break
    lines.append("")
    rows = [answer_row(a, price, criteria) for a in answers]
    cols = COLS[kind] + ([("cost_per_hour", "$/hour", "{:.2f}")] if price else []) + TAIL
    lines.append(text_table(rows, cols))
    for a in answers:
        bind = answer_binding(a, criteria)
        if bind is not None:
            lines.append(f"{a.label}: {bind.text()}")
        if a.error:
            lines.append(f"{a.label}: cannot run: {a.error}")
        elif a.value is None:
            b = a.best
            what = "no rate" if kind == "max-rate" else f"no replica count up to {max(p['replicas'] for p in a.points)}"
            if a.stopped:
                what = "no rate" if kind == "max-rate" else "no replica count"
            lines.append(f"{a.label}: {what} meets the criteria"
                         + (f" ({a.stopped})" if a.stopped else "")
                         + "; best point found: " + (_point(b, kind) if b else "none"))
    if sens:
        lines += sensitivity.lines(answers, sens)
    return "\n".join(lines)


def _point(p: dict, kind: str) -> str:
    where = (f"{p['rate']:.2f} req/s (x{p['rate_scale']:.3g})" if kind == "max-rate"
             else f"{p['replicas']} replicas")
    return (f"{where}: TTFT p99 {p['p99_ttft_ms']:.0f} ms, TPOT p99 {p['p99_tpot_ms']:.1f} ms, "
            f"{p['slo_attainment']:.1%} in SLO, {p['rejected']} rejected{_too_long(p)} and {p['unfinished']} "
            f"unfinished of {p['requests']}, queue {p['stability']}; fails: {p['failures']}")


def _too_long(p: dict) -> str:
    return f" ({p['too_long']} longer than the model's context)" if p.get("too_long") else ""


def write(out: Path, answers: list[Answer], sens: list[tuple], criteria: Criteria,
          cfg: ExperimentConfig, price: float | None) -> list[str]:
    files = write_rows(out / "answers", [answer_row(a, price, criteria) for a in answers])
    points = [{"search": a.label, **p} for a in answers for p in a.points]
    files += write_rows(out / "points", points)
    if sens:
        files += write_rows(out / "sensitivity", sensitivity.rows(sens))
    kind = answers[0].kind
    files.append(plot_answers(out / f"{kind}.png", answers, criteria,
                              f"{kind}: {criteria.describe()} ({cfg.workload.source})"))
    return files


def as_json(answers: list[Answer], sens: list[tuple], price: float | None,
            criteria: Criteria | None = None) -> dict:
    return {"answers": [answer_row(a, price, criteria) for a in answers],
            "points": {a.label: a.points for a in answers},
            "sensitivity": sensitivity.rows(sens)}
