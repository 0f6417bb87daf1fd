"""figures_by (core/class_summary.py): each class's figures from its own rows, in table
order, whichever way the rows are found (a round-robin's replica column, which repeats
every few rows, by strides; any other by a stable sort): the same figures as the class's
rows taken by a mask."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.class_summary import ClassFigures, class_figures, figures_by
from batchlab.core.summary import SLO, _stats, meets_slo, per_request_latencies


def table(rng: np.random.Generator, classes: np.ndarray) -> dict[str, np.ndarray]:
    n = len(classes)
    arrival = np.sort(rng.uniform(0, 100, n))
    first = arrival + rng.exponential(0.05, n)
    status = np.where(rng.uniform(size=n) < 0.9, "finished", "rejected").astype(object)
    return {"class": classes, "status": status, "arrival_s": arrival, "first_scheduled_s": arrival + 0.001,
            "first_token_s": first, "finish_s": first + rng.exponential(1.0, n),
            "output_len": rng.integers(1, 50, n)}


def same(a, b) -> bool:
    return all(x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y))
               for x, y in zip([*a.__dict__.values(), *a.stats.values()], [*b.__dict__.values(), *b.stats.values()]))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 9), st.integers(1, 40), st.booleans(), st.booleans())
def test_a_class_has_the_figures_of_its_rows(seed, m, rounds, periodic, tail):
    rng = np.random.default_rng(seed)
    first = int(rng.integers(0, 50))
    if periodic:  # replicas first..first+m-1 dealt in turn, maybe a last round cut short
        classes = np.tile(np.arange(first, first + m), rounds)
        if tail:
            classes = classes[:len(classes) - int(rng.integers(1, m))]
    else:
        classes = rng.integers(first, first + m, m * rounds)
    req = table(rng, classes)
    slo = SLO(ttft_ms=60.0, tpot_ms=20.0)
    got = figures_by(req, "class", slo)
    values = sorted(set(classes.tolist()))
    assert list(got) == values
    for v in values:
        mask = classes == v
        want = class_figures({c: col[mask] for c, col in req.items()}, slo)
        assert same(got[v], want), v


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 60), st.sampled_from([None, 60.0]), st.sampled_from([None, 20.0]),
       st.sampled_from([None, 900.0]), st.floats(0.0, 1.0))
def test_class_figures_are_the_summarys_own_formulas(seed, n, ttft_ms, tpot_ms, e2el_ms, finished):
    """Per-request figures computed once over the table (class_summary._row_figures) give
    what core/summary.py's per_request_latencies and meets_slo give on the finished rows:
    unfinished rows (no first token, no finish), one-token replies and absent objectives
    included."""
    rng = np.random.default_rng(seed)
    req = table(rng, np.zeros(n, dtype=np.int64))
    status = rng.choice(np.array(["finished", "rejected", "running"], dtype=object), n,
                        p=[finished, (1 - finished) / 2, (1 - finished) / 2])
    req["status"] = status
    req["first_token_s"] = np.where(status == "finished", req["first_token_s"], np.nan)
    req["finish_s"] = np.where(status == "finished", req["finish_s"], np.nan)
    slo = None if ttft_ms is tpot_ms is e2el_ms is None else SLO(ttft_ms=ttft_ms, tpot_ms=tpot_ms, e2el_ms=e2el_ms)
    done = status == "finished"
    lat = per_request_latencies(req, done)
    stats: dict[str, float] = {}
    for name, key in (("ttft", "ttft"), ("tpot", "tpot"), ("e2el", "e2el"), ("queueing_delay", "queue")):
        stats.update(_stats(name, lat[key]))
    want = ClassFigures(n, int(done.sum()), int((status == "rejected").sum()), int(req["output_len"][done].sum()),
                        stats, None if slo is None else int(meets_slo(req, slo, lat, done).sum()))
    assert same(class_figures(req, slo), want)
