"""The summary's latency figures (core/summary.py): computed two at a time on a long
table, and the percentiles partitioned in place, they are the plain formulas' floats."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core import summary as S


def _plain(prefix, values_s):
    v = np.asarray(values_s, float) * 1000.0
    if not len(v):
        return None
    p = np.percentile(v, (50, *S.PERCENTILES))
    return {f"mean_{prefix}_ms": float(v.mean()), f"median_{prefix}_ms": float(p[0]),
            f"std_{prefix}_ms": float(v.std()), **{f"p{q}_{prefix}_ms": float(x) for q, x in zip(S.PERCENTILES, p[1:])}}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=500))
def test_stats_are_the_plain_formulas(values):
    arr = np.array(values)
    got = S._stats("x", arr)
    assert got == _plain("x", arr)
    assert np.array_equal(arr, np.array(values))  # the caller's column untouched


def _table(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(0.01, n))
    scheduled = arrival + rng.exponential(0.05, n)
    first = scheduled + rng.exponential(0.02, n)
    out_len = rng.integers(1, 50, n)
    finish = first + out_len * rng.uniform(0.01, 0.03, n)
    status = np.empty(n, dtype=object)
    status[:] = rng.choice(["finished", "finished", "rejected", "unfinished"], n)
    return {"request_id": np.arange(n), "arrival_s": arrival, "first_scheduled_s": scheduled,
            "first_token_s": first, "finish_s": finish, "prompt_len": rng.integers(1, 900, n),
            "output_len": out_len, "status": status}


@settings(max_examples=10, deadline=None)
@given(st.integers(5, 3000), st.integers(0, 2**31), st.booleans())
def test_a_long_tables_figures_are_those_of_one_thread(n, seed, slo):
    req = _table(n, seed)
    steps = {"num_steps": 10, "seat_fraction": 3.0, "kv_fraction": 2.0, "preemptions": 0}
    itl = (np.array([0.01, 0.02]), np.array([3, 4]))
    objective = S.SLO(ttft_ms=80.0) if slo else None
    keep = S.THREADED_ROWS
    try:
        S.THREADED_ROWS = 10**12
        one = S.summarize(req, steps, itl, objective)
        S.THREADED_ROWS = 1
        two = S.summarize(req, steps, itl, objective)
    finally:
        S.THREADED_ROWS = keep
    assert list(one) == list(two)
    assert all(a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(one.values(), two.values()))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 400), st.integers(0, 2**31), st.booleans(), st.booleans())
def test_prefix_and_slo_figures_are_the_masked_formulas(n, seed, all_finished, all_scheduled):
    """Where every request finished (was scheduled), the columns themselves stand for
    their masked copies: the same figures."""
    req = _table(n, seed)
    rng = np.random.default_rng(seed)
    req["cached_tokens"] = rng.integers(0, 100, n)
    if all_finished:
        req["status"][:] = "finished"
    if not all_scheduled:
        req["first_scheduled_s"][::3] = np.nan
    scheduled = ~np.isnan(req["first_scheduled_s"])
    want = (int(req["prompt_len"][scheduled].sum()), int(req["cached_tokens"][scheduled].sum()))
    got = S.prefix_cache_stats(req)
    assert (got["prefix_cache_queries"], got["prefix_cache_hits"]) == want
    done = req["status"] == "finished"
    lat = S.per_request_latencies(req, done)
    slo = S.SLO(ttft_ms=60.0, tpot_ms=25.0, e2el_ms=900.0)
    tpot = np.zeros(int(done.sum()))
    tpot[req["output_len"][done] > 1] = lat["tpot"]
    ok = (lat["ttft"] * 1000 <= 60.0) & (tpot * 1000 <= 25.0) & (lat["e2el"] * 1000 <= 900.0)
    assert np.array_equal(S.meets_slo(req, slo, lat, done), ok)
