"""Round-robin replicas run one after another, each to its end (sim/apart.py): the same
runs, to the bit, as the replicas interleaved in time (simulate.APART = False): request
rows, step table, gaps, totals, meta and summary, over every policy and price, bursts,
idle gaps, rejected prompts, stepping and fast-forward, with and without a step table."""
from __future__ import annotations

import importlib
import json

import numpy as np
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.workload import Workload
from batchlab.sim.arrivals import Arrivals
from batchlab.sim.dealt import dealt_block
from tests.same_runs import COSTS, assert_identical, switched
from tests.test_fast_forward import scenarios

simulate_module = importlib.import_module("batchlab.sim.simulate")  # batchlab.sim.simulate is the function
apart_module = importlib.import_module("batchlab.sim.apart")
COST = LinearCostModel(0.004, {"prefill_tokens": 2e-5, "num_seqs": 1e-4, "kv_tokens_read": 1e-7})


def both(work: Workload, per_window: int = 1, **kw):
    """(apart, interleaved), and the requests each told progress() of; apart, also in
    windows of per_window requests a replica (keep_on_interrupt), which must equal them."""
    out = []
    for apart, kept in ((True, True), (True, False), (False, False)):
        left = [0]
        with switched(simulate_module, "APART", apart), switched(apart_module, "PER_WINDOW", per_window):
            r = simulate_module.simulate(work, progress=lambda n: left.__setitem__(0, left[0] + n),
                                         keep_on_interrupt=kept, **kw)
        out.append((r, left[0]))
    assert_all_same(out[0][0], out[1][0])
    assert out[0][1] == out[1][1]
    return out[1:]


def assert_all_same(a, b) -> None:
    assert_identical(a, b)
    assert a.meta == b.meta and a.totals == b.totals
    assert json.dumps(a.summary(), sort_keys=True) == json.dumps(b.summary(), sort_keys=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(2, 7), st.booleans(), st.booleans(), st.booleans(), st.integers(1, 3))
def test_apart_runs_as_interleaved(scenario, replicas, record_steps, fast, lagged, per_window):
    work, cfg, blocks, cost, _ = scenario
    work = work.replace(max_concurrency=None)  # a closed loop couples the replicas (interleaved)
    (apart, told), (mixed, mixed_told) = both(work, per_window, scheduler=cfg, cost=COSTS[cost],
                                              num_kv_blocks=blocks, replicas=replicas, record_steps=record_steps,
                                              fast_forward=fast, async_scheduling=lagged)
    assert_all_same(apart, mixed)
    assert told == mixed_told


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 80), rate=st.sampled_from([0.05, 0.5, 5.0, 50.0]),
       burst=st.booleans(), policy=st.sampled_from(["continuous", "chunked", "static"]),
       replicas=st.integers(2, 7), fast_forward=st.booleans(), seats=st.sampled_from([2, 8]),
       long_prompts=st.booleans(), per_window=st.integers(1, 4))
def test_apart_runs_as_interleaved_over_idle_gaps(seed, n, rate, burst, policy, replicas, fast_forward,
                                                  seats, long_prompts, per_window):
    """Idle gaps of every length (an alarm's sum now + (t - now) an ulp off t), bursts at
    one instant, prompts over the KV pool (rejected) and a policy's own deadline."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n) * rng.choice([0.01, 1.0, 30.0], n))
    if burst:
        t = np.floor(t * 2) / 2
        t[0] = 0.0
    w = Workload(t, rng.integers(1, 1200 if long_prompts else 300, n), rng.integers(1, 40, n))
    (apart, _), (mixed, _) = both(w, per_window, scheduler=SchedulerConfig(policy=policy, max_num_seqs=seats),
                                  cost=COST, num_kv_blocks=40, replicas=replicas, fast_forward=fast_forward)
    assert_all_same(apart, mixed)


def test_round_robin_runs_apart_unless_watched(monkeypatch):
    """Apart where the replicas do not depend on each other, in windows where Ctrl-C may
    stop the run and keep what it simulated (a span of time, not some replicas);
    interleaved where an observer watches the steps in time order, or under another router."""
    runs = []
    real = simulate_module.run_apart
    monkeypatch.setattr(simulate_module, "run_apart", lambda *a: runs.append((a[1], len(a[3]))) or real(*a))
    monkeypatch.setattr(apart_module, "PER_WINDOW", 2)
    n = 40
    w = Workload(np.arange(n) * 0.5, np.full(n, 32), np.full(n, 8))
    kw = dict(scheduler=SchedulerConfig(policy="continuous"), cost=COST, num_kv_blocks=400)
    simulate_module.simulate(w, replicas=3, **kw)
    simulate_module.simulate(w, replicas=3, keep_on_interrupt=True, **kw)
    assert runs == [(3, 0), (3, 6)]  # windows end at requests 6, 12, ... 36
    for other in (dict(replicas=1), dict(replicas=3, observer=lambda *a: None),
                  dict(replicas=3, router="least_loaded"), dict(replicas=3, workload_max_concurrency=2)):
        work = w.replace(max_concurrency=other.pop("workload_max_concurrency", None))
        r = simulate_module.simulate(work, **other, **kw)
        assert (r.requests["status"] == "finished").all()
    assert len(runs) == 2


def test_dealt_block_is_the_workloads_requests():
    rng = np.random.default_rng(3)
    n = 50
    w = Workload(np.sort(rng.uniform(0, 9, n)), rng.integers(1, 99, n), rng.integers(1, 99, n),
                 priority=rng.integers(0, 3, n), prefix_hashes=[tuple(rng.integers(0, 5, k % 3)) for k in range(n)],
                 hash_block_size=16)
    for first, every in ((0, 1), (2, 7), (6, 7), (0, 50), (3, 4)):
        dealt = list(range(first, n, every))
        got = dealt_block(w, first, every, len(dealt))
        want = [w.request(i) for i in dealt]
        assert [vars_of(r) for r in got] == [vars_of(r) for r in want]


def vars_of(r) -> tuple:
    return (r.id, r.arrival, r.prompt_len, r.output_len, r.priority, r.prefix_hashes, r.hash_block_size)


@given(st.integers(1, 9), st.integers(0, 8), st.integers(0, 40))
def test_arrivals_dealt_to_one_replica_pull_its_own(every, first, n):
    """Arrivals(first, every) hands on requests first, first + every, ... in order, each
    at its own instant, with its id, and says when the next one comes."""
    first %= every
    times = np.sort(np.random.default_rng(n).uniform(0, 10, n))
    got = []
    a = Arrivals(simpy.Environment(), Workload(times, np.ones(n, np.int64), np.ones(n, np.int64)),
                 lambda r, now: got.append((r.id, now)), first=first, every=every)
    want = [(i, float(times[i])) for i in range(first, n, every)]
    for k, (i, t) in enumerate(want):
        assert a.next_time() == t
        a.pull(t)
        assert got[k] == (i, t)
    assert a.next_time() == float("inf") and len(got) == len(want)
