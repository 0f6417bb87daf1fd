"""Open-loop arrivals pulled by the engines (sim/arrivals.py: no SimPy event a request)
run as a process sending each request at its time: the same request rows and step table
over policies, replicas, routers, bursts of equal arrival times, rejected requests and
idle gaps, fast-forwarded or stepped. Equal to the last bit but for the clock's rounding:
an engine woken at an arrival reaches it as idle_start + (t - idle_start), the process as
previous_arrival + (t - previous_arrival), which can round to different ulps of t (no
delay from some starts lands exactly on t), so times agree to 1e-12."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.workload import Workload
from batchlab.sim import arrivals, simulate
from batchlab.sim.counting import counting_events
from tests.same_runs import switched

COST = LinearCostModel(0.004, {"prefill_tokens": 2e-5, "num_seqs": 1e-4, "kv_tokens_read": 1e-7})


def run(w: Workload, pulled: bool, **kw):
    with switched(arrivals, "PULL", pulled), counting_events() as events:
        r = simulate(w, **kw)
    return r, events[0]


def assert_same(a, b) -> None:
    """Every column equal; float columns (times) to 1e-12 relative (module docstring)."""
    for x, y in ((a.requests, b.requests), (a.steps or {}, b.steps or {})):
        assert x.keys() == y.keys()
        for k in x:
            u, v = np.asarray(x[k]), np.asarray(y[k])
            if u.dtype.kind == "f":
                np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-12, err_msg=k)
            else:
                assert u.tolist() == v.tolist(), k


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 60), rate=st.sampled_from([0.5, 5.0, 50.0]),
       burst=st.booleans(), policy=st.sampled_from(["continuous", "chunked", "static"]),
       replicas=st.integers(1, 3), router=st.sampled_from(["round_robin", "least_loaded"]),
       fast_forward=st.booleans(), seats=st.sampled_from([2, 8]))
def test_pulled_arrivals_run_as_sent_ones(seed, n, rate, burst, policy, replicas, router, fast_forward, seats):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    if burst:  # several requests at one instant, and at the first
        t = np.floor(t * 2) / 2
        t[0] = 0.0
    w = Workload(t, rng.integers(1, 300, n), rng.integers(1, 40, n))
    kw = dict(scheduler=SchedulerConfig(policy=policy, max_num_seqs=seats), cost=COST,
              num_kv_blocks=40, replicas=replicas, router=router, fast_forward=fast_forward)
    pulled, pulled_events = run(w, True, **kw)
    sent, sent_events = run(w, False, **kw)
    assert_same(pulled, sent)
    if replicas == 1:  # (idle replicas each wake at the next arrival: one event more apiece)
        assert pulled_events <= sent_events  # never more events than a process sending each


def test_a_busy_engine_pulls_without_an_event_a_request():
    """A saturated replica: every request but those meeting an idle engine is pulled."""
    n = 400
    w = Workload(np.linspace(0, 2, n), np.full(n, 64), np.full(n, 16))
    kw = dict(scheduler=SchedulerConfig(policy="continuous", max_num_seqs=16), cost=COST, num_kv_blocks=4000)
    pulled, pulled_events = run(w, True, **kw)
    sent, sent_events = run(w, False, **kw)
    assert_same(pulled, sent)
    assert sent_events - pulled_events >= n * 0.9


@pytest.mark.parametrize("n", [0, 1, 1025, 2049])  # around the blocks requests are made in
def test_every_request_is_handed_on_once_in_order(n):
    w = Workload(np.arange(n) * 0.01, np.full(n, 8), np.full(n, 2))
    r, _ = run(w, True, scheduler=SchedulerConfig(policy="continuous"), cost=COST, num_kv_blocks=400)
    ids = np.asarray(r.requests["request_id"]) if n else np.zeros(0)
    assert sorted(ids.tolist()) == list(range(n))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 2500), every=st.integers(1, 7), pulls=st.lists(st.floats(0.0, 30.0), max_size=6))
def test_the_next_arrival_for_a_replica_is_the_workloads(n, every, pulls):
    """next_time_for reads a request made ahead (in its block) or the workload's column:
    the same time either way. (Dealt requests, deal_to: test_pulled_arrivals_run_as_sent_ones,
    round-robin over replicas, against the router.)"""
    import simpy
    rng = np.random.default_rng(n)
    w = Workload(np.cumsum(rng.exponential(0.01, n)), np.full(n, 8), np.full(n, 2))
    got: list[int] = []
    a = arrivals.Arrivals(simpy.Environment(), w, lambda r, t: got.append(r.id))
    for t in sorted(pulls):
        a.pull(t)
        done = int(np.searchsorted(w.arrival, t, side="right"))
        assert got == list(range(done))
        for first in range(every):
            j = done + (first - done) % every
            assert a.next_time_for(first, every) == (float(w.arrival[j]) if j < n else np.inf)
