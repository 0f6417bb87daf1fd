"""Step by step: what each step ran (its composition), where two schedules coincide, and
how well the cost model predicts the measured duration of each step.

A composition is the exact work of a step: for every sequence, (request id, first
position, tokens), plus the ids preempted while forming it. Two steps with equal
compositions did identical work, so their durations are directly comparable, wherever
they fall in their runs. Without recorded compositions (e.g. tables read back from CSV)
the step table's feature columns stand in: equal features, very probably equal work
(per_step.py)."""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Hashable

import numpy as np

from batchlab.core.batch import Batch
from batchlab.core.cost.form import CostModel
from batchlab.core.step_table import price
from batchlab.experiments.validation.records import DurationError, StepMatch

Composition = tuple[tuple[tuple[int, int, int], ...], tuple[int, ...]]


def composition(batch: Batch) -> Composition:
    """(sorted (id, start, tokens) of the sequences run, sorted ids preempted)."""
    run = tuple(sorted(zip((s.id for s in batch.seqs), batch.starts, batch.num_tokens)))
    return run, tuple(sorted(s.id for s in batch.preempted))


def first_divergence(a: list[Hashable], b: list[Hashable]) -> int | None:
    """Index of the first step where the schedules differ (one run ending before the
    other counts), or None where they are identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def match_steps(a: list[Hashable], b: list[Hashable]) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i in a, j in b) of steps with equal keys; the k-th occurrence of a key
    in a pairs with its k-th occurrence in b (compositions are unique within a run)."""
    where: dict[Hashable, list[int]] = defaultdict(list)
    for j, key in enumerate(b):
        where[key].append(j)
    taken: dict[Hashable, int] = defaultdict(int)
    ia, ib = [], []
    for i, key in enumerate(a):
        js = where.get(key)
        if js and taken[key] < len(js):
            ia.append(i)
            ib.append(js[taken[key]])
            taken[key] += 1
    return np.asarray(ia, dtype=np.int64), np.asarray(ib, dtype=np.int64)


def duration_error(measured: np.ndarray, predicted: np.ndarray) -> DurationError:
    """Absolute percentage error of predicted vs measured step times (median, p90), the
    signed error of the total (what accumulates into latency) and the median ratio
    measured / predicted (the bias of a typical step)."""
    measured, predicted = np.asarray(measured, float), np.asarray(predicted, float)
    n = int(measured.size)
    ok = (measured > 0) & (predicted > 0)
    if not ok.any():
        return DurationError(steps=n, median_ape=math.nan, p90_ape=math.nan, total_error=math.nan,
                             median_ratio=math.nan)
    ape = np.abs(predicted[ok] - measured[ok]) / measured[ok]
    total = float(measured.sum())
    return DurationError(steps=n, median_ape=float(np.median(ape)), p90_ape=float(np.percentile(ape, 90)),
                         total_error=float(predicted.sum() - total) / total if total > 0 else math.nan,
                         median_ratio=float(np.median(measured[ok] / predicted[ok])))


def step_error(steps: dict[str, np.ndarray], cost: CostModel) -> DurationError:
    """`cost`'s price of every step of a real run's table, from the step's own features
    (the profile, without any correction), against the measured durations."""
    return duration_error(steps["duration_s"], price(steps, cost))


def step_match(real_keys: list[Hashable], sim_keys: list[Hashable]) -> StepMatch:
    """The schedules side by side: how long they coincide, and how many steps did
    identical work in both, wherever they fall."""
    first = first_divergence(real_keys, sim_keys)
    ia, _ = match_steps(real_keys, sim_keys)
    n_real = len(real_keys)
    return StepMatch(real_steps=n_real, sim_steps=len(sim_keys), identical=first is None,
                     first_divergence=first, coincide_prefix=n_real if first is None else first,
                     matched=int(ia.size), matched_fraction=ia.size / n_real if n_real else math.nan)
