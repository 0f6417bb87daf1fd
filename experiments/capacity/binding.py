"""What binds a capacity answer: of everything a point must meet (each SLO limit at its
percentile, or the goodput share; a stable queue; every request served) and what the
deployment runs out of (KV memory, seats), which is tightest at the answer, with its
headroom, and what the next-cheaper option (one replica fewer, the next cheaper
deployment, the next higher rate) failed on and by how much.

Headroom is relative: (limit - value) / limit for a latency, (value - goal) / goal for
goodput, 1 - mean use for KV memory and seats (means over the run's steps: a peak can be
higher). A KV pool or seats bind where the next-cheaper option preempted or filled its
seats, since the simulator then queues rather than fails outright."""
from __future__ import annotations

import math
from typing import NamedTuple

from batchlab.experiments.capacity.point import Criteria

SEATS_FULL = 0.9  # mean seat use above this: seats are what the load is waiting for


class Constraint(NamedTuple):
    name: str  # "p99 TPOT", "goodput", "KV memory", "seats"
    value: float
    limit: float
    headroom: float  # relative slack; negative where it is missed
    unit: str  # "ms", "share"

    def text(self) -> str:
        if self.unit == "ms":
            return f"{self.name} {self.value:.1f} ms of {self.limit:g}"
        return f"{self.name} {self.value:.1%} (of {self.limit:.0%})"


class Binding(NamedTuple):
    constraint: str  # what binds: what the next-cheaper option fails on
    headroom: float  # the binding constraint's at the answer (relative); NaN where not measured
    detail: str  # the answer's use of KV memory and seats, in words
    next_label: str  # the next-cheaper option ('' where there is none)
    next_failure: str  # what it failed on, in words
    next_miss: float  # by how much (relative), NaN where not a number (a queue, a model that does not fit)
    next_what: str = "cheaper"  # what the next option is: "cheaper", or for max-rate "rate up"
    tightest: str = ""  # the objective with the least headroom at the answer: what to watch
    tightest_headroom: float = math.nan
    tightest_text: str = ""  # its value against its limit

    def text(self) -> str:
        """The tightest objective at the answer first (what to watch in production), then
        what binds: what the next-cheaper option fails on."""
        watch = (f"tightest at the answer: {self.tightest_text} ({self.tightest_headroom:+.0%} headroom)"
                 if self.tightest else "")
        binds = ""
        if self.next_label:
            here = (f"{self.headroom:+.0%} headroom here; " if math.isfinite(self.headroom)
                    and self.constraint != self.tightest else "")
            same = " too" if self.constraint == self.tightest else ""
            binds = f"binds: {self.constraint}{same} ({here}what the next {self.next_what} fails on)"
        head = "; ".join(x for x in (watch, binds) if x)
        head += f"; {self.detail}"
        if not self.next_label:
            return head + f"; no {self.next_what} option to compare"
        miss = f" (missed by {self.next_miss:.0%})" if math.isfinite(self.next_miss) else ""
        return head + f"; the next {self.next_what}, {self.next_label}, fails: {self.next_failure}{miss}"


def constraints(p: dict, criteria: Criteria) -> list[Constraint]:
    """A point's criteria as relative headrooms (SLO limits, or goodput), and its use of
    KV memory and seats."""
    out = []
    if criteria.goodput is not None:
        got = _num(p.get("slo_attainment"))
        out.append(Constraint("goodput", got, criteria.goodput, (got - criteria.goodput) / criteria.goodput,
                              "share"))
    else:
        for m, limit in criteria.limits():
            v = _num(p.get(criteria.key(m)))
            label = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "E2E latency"}[m]
            out.append(Constraint(f"p{criteria.percentile} {label}", v, limit, (limit - v) / limit, "ms"))
    for name, key in (("KV memory", "kv_utilization"), ("seats", "slot_utilization")):
        use = _num(p.get(key))
        out.append(Constraint(name, use, 1.0, 1.0 - use, "share"))
    return out


def binding(answer: dict, nxt: dict | None, criteria: Criteria, next_label: str = "",
            next_what: str = "cheaper") -> Binding:
    """What binds at the answer point, and how the next-cheaper option (nxt, a point
    that failed; None where there is none) missed."""
    cons = constraints(answer, criteria)
    slo = [c for c in cons if c.unit == "ms" or c.name == "goodput"]
    tight = min(slo, key=lambda c: _finite(c.headroom, math.inf))
    use = {c.name: c for c in cons if c.unit == "share" and c.name != "goodput"}

    detail = (f"KV cache {_pct(use['KV memory'].value)} used, seats {_pct(use['seats'].value)} used "
              f"(means), {answer.get('preemptions', 0):.0f} preemptions")
    watch = (tight.name, tight.headroom, tight.text())
    if nxt is None:
        return Binding(tight.name, tight.headroom, detail, "", "", math.nan, next_what, *watch)
    what, miss, name = _failure(nxt, criteria)
    constraint = name or tight.name
    mine = next((c for c in slo if c.name == constraint), None)
    headroom = next((c.headroom for c in cons if c.name == constraint), math.nan)
    if mine is not None and mine is not tight:
        detail = f"{mine.text()}; {detail}"
    return Binding(constraint, headroom, detail, next_label, what, miss, next_what, *watch)


def failure_text(p: dict, criteria: Criteria) -> str:
    """What a failing point failed on, in words."""
    return _failure(p, criteria)[0]


def _failure(p: dict, criteria: Criteria) -> tuple[str, float, str]:
    """(what a failing point failed on, the relative miss, the constraint's name) of its
    worst failure; an SLO miss is named, a queue that grows is throughput."""
    if p.get("error"):
        return p["error"], math.nan, ""
    failed = [c for c in constraints(p, criteria) if (c.unit == "ms" or c.name == "goodput") and c.headroom < 0]
    kv_full = p.get("preemptions", 0) > 0
    seats_full = _num(p.get("slot_utilization")) > SEATS_FULL
    if p.get("stability") == "overloaded" and not failed:
        why = "KV memory" if kv_full else ("seats" if seats_full else "throughput")
        return f"the queue grows ({why} runs out)", math.nan, why
    if (p.get("rejected", 0) or p.get("unfinished", 0)) and not failed:
        return (f"{p.get('rejected', 0):.0f} rejected + {p.get('unfinished', 0):.0f} unfinished requests",
                math.nan, "requests served")
    if not failed:
        return p.get("failures") or "its criteria", math.nan, ""
    worst = min(failed, key=lambda c: c.headroom)
    extra = (f"; {p['preemptions']:.0f} preemptions (KV memory)" if kv_full else "") + \
        (f"; seats {_pct(p['slot_utilization'])} used" if seats_full else "")
    return worst.text() + extra, -worst.headroom, worst.name


def _num(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def _finite(x: float, default: float) -> float:
    return x if math.isfinite(x) else default


def _pct(x) -> str:
    x = _num(x)
    return "-" if not math.isfinite(x) else f"{x:.0%}"
