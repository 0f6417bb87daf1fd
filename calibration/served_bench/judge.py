"""Predicted against measured, over benchmark rows: the per-row error of mean TTFT and
TPOT, their median and p90, which side each (model, GPU, TP) group is priced on, and
along each load curve the highest concurrency meeting a TPOT objective."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from batchlab.calibration.served_bench.read import BenchmarkRow

OBJECTIVES_MS = (20.0, 30.0, 50.0)
ONE_SIDED = 0.7  # a group with more than this share priced on one side is biased, not noisy


@dataclass(frozen=True)
class Predicted:
    row: BenchmarkRow
    ttft_s: float
    tpot_s: float

    @property
    def ttft_error(self) -> float:
        return self.ttft_s / self.row.ttft_s - 1

    @property
    def tpot_error(self) -> float:
        return self.tpot_s / self.row.tpot_s - 1


@dataclass(frozen=True)
class Spread:
    n: int
    median: float  # of |error|
    p90: float
    slow_share: float  # priced slower than measured

    @classmethod
    def of(cls, errors: list[float]) -> Spread:
        e = np.asarray(errors, dtype=float)
        return cls(len(e), float(np.median(np.abs(e))), float(np.percentile(np.abs(e), 90)), float((e > 0).mean()))


@dataclass(frozen=True)
class GroupSide:
    group: tuple[str, str, int]
    tpot: Spread
    ttft: Spread

    @property
    def one_sided(self) -> bool:
        return max(self.tpot.slow_share, 1 - self.tpot.slow_share) > ONE_SIDED


@dataclass(frozen=True)
class CurveAnswer:
    curve: tuple
    objective_ms: float
    measured: int | None  # the highest concurrency meeting it (None: none does)
    predicted: int | None
    steps_apart: int  # in the curve's measured concurrencies
    levels: tuple[int, ...]  # the curve's measured concurrencies, ascending

    @property
    def binds(self) -> bool:
        """The objective is crossed inside the measured curve: an answer that could be wrong
        both ways (one at the curve's top is met by every measured point)."""
        return self.measured != self.levels[-1]


@dataclass(frozen=True)
class Judgement:
    rows: list[Predicted]
    tpot: Spread
    ttft: Spread
    groups: list[GroupSide]
    answers: list[CurveAnswer]

    def answer_share(self, within: int = 0, objective_ms: float | None = None, binding: bool = False) -> float:
        """The share of answers (at one objective, or all; binding: only those whose
        objective the measured curve crosses) within `within` measured steps."""
        picked = [a for a in self.answers if (objective_ms is None or a.objective_ms == objective_ms)
                  and (a.binds or not binding)]
        return float(np.mean([a.steps_apart <= within for a in picked])) if picked else float("nan")


def sides_the_rows_fix(j: Judgement, ran_less: set[BenchmarkRow]) -> list[tuple[GroupSide, str]]:
    """The one-sided groups no price could balance, each with why: a group of one row is on
    one side whatever the price, and one whose rows ran less than they state (floor.py)
    beyond the ONE_SIDED share has those cycles priced slow by any price at or above the
    floor."""
    out = []
    for g in j.groups:
        below = sum(p.row in ran_less for p in j.rows if p.row.group == g.group)
        if g.tpot.n == 1:
            out.append((g, "one row"))
        elif below / g.tpot.n > ONE_SIDED:
            out.append((g, f"{below} of {g.tpot.n} rows ran less than they state"))
    return out


def _highest(points: list[tuple[int, float]], objective_s: float) -> int | None:
    ok = [c for c, t in points if t <= objective_s]
    return max(ok) if ok else None


def curve_answers(rows: list[Predicted], objectives_ms=OBJECTIVES_MS) -> list[CurveAnswer]:
    curves: dict[tuple, list[Predicted]] = defaultdict(list)
    for p in rows:
        curves[p.row.curve].append(p)
    out = []
    for curve, ps in curves.items():
        if len(ps) < 2:
            continue  # one point is no curve
        levels = sorted(p.row.concurrency for p in ps)
        for obj in objectives_ms:
            m = _highest([(p.row.concurrency, p.row.tpot_s) for p in ps], obj / 1e3)
            s = _highest([(p.row.concurrency, p.tpot_s) for p in ps], obj / 1e3)
            pos = [-1 if c is None else levels.index(c) for c in (m, s)]
            out.append(CurveAnswer(curve, obj, m, s, abs(pos[0] - pos[1]), tuple(levels)))
    return out


def judge(rows: list[Predicted]) -> Judgement:
    groups: dict[tuple, list[Predicted]] = defaultdict(list)
    for p in rows:
        groups[p.row.group].append(p)
    sides = [GroupSide(g, Spread.of([p.tpot_error for p in ps]), Spread.of([p.ttft_error for p in ps]))
             for g, ps in sorted(groups.items())]
    return Judgement(rows, Spread.of([p.tpot_error for p in rows]), Spread.of([p.ttft_error for p in rows]),
                     sides, curve_answers(rows))
