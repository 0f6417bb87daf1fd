"""The sensitivity of a capacity answer: every knob of its price (and, sizing replicas,
the traffic's rate) at each end of its range, the answer each gave, and the range of
the answer over them all, as lines and as rows."""
from __future__ import annotations

from batchlab.experiments.capacity.search import Answer
from batchlab.experiments.capacity.tasks import Variant


def _answer(a: Answer) -> str:
    if a.value is None:
        return "cannot run" if a.error else "none meets the criteria"
    return f"{a.value:.2f} req/s" if a.kind == "max-rate" else f"{a.value:g} replicas"


def answer_range(base: Answer, varied: list[Answer]) -> str:
    """'3-5 replicas' over the base answer and every variant; 'none' counts as above
    every replica count tried (replicas) or below every rate (max-rate)."""
    got = [a.value for a in [base, *varied] if a.value is not None]
    if not got:
        return "no answer under any knob"
    lo, hi = min(got), max(got)
    unit = " req/s" if base.kind == "max-rate" else " replicas"
    fmt = (lambda x: f"{x:.2f}") if base.kind == "max-rate" else (lambda x: f"{x:g}")
    text = f"{fmt(lo)}{unit}" if lo == hi else f"{fmt(lo)}-{fmt(hi)}{unit}"
    missing = sum(a.value is None for a in varied)
    return text + (f"; {missing} variant(s) with no answer" if missing else "")


def lines(main: list[Answer], sens: list[tuple[Variant, Answer]]) -> list[str]:
    out = ["", ("sensitivity (the search again with each knob of the price at the low and the high end "
                "of its range):")]
    for i, a in enumerate(main):
        mine = [(v, b) for v, b in sens if v.search == i]
        if not mine:
            continue
        out.append(f"  {a.label}: {_answer(a)} as assumed; {answer_range(a, [b for _, b in mine])} over the knobs")
        for knob in dict.fromkeys(v.knob for v, _ in mine):
            ends = [(v, b) for v, b in mine if v.knob == knob]
            v0 = ends[0][0]
            cells = "; ".join(f"{v.end} {v.value:.4g}: {_answer(b)}" for v, b in ends)
            out.append(f"    {knob} {v0.base:.4g} ({v0.source}): {cells}")
    return out


def rows(sens: list[tuple[Variant, Answer]]) -> list[dict]:
    return [{"label": v.label, "search": v.search, "knob": v.knob, "end": v.end, "value": v.value, "base": v.base,
             "source": v.source, "answer": a.value, "error": a.error} for v, a in sens]
