"""Round-robin replicas wake only for their own arrivals (issue 48 item 2): request i goes
to replica i mod R whatever the replicas' state, so a replica's runs end at the next
arrival dealt to it, not at every arrival. Results stay those of stepping, and decisions
per request do not grow with the number of replicas."""
from __future__ import annotations

import math

import numpy as np
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.workload import Workload
from batchlab.sim import simulate
from batchlab.sim.arrivals import Arrivals
from batchlab.sim.counting import counting_decisions
from tests.same_runs import COSTS, assert_same
from tests.test_fast_forward import scenarios


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(2, 5))
def test_round_robin_fast_forward_equals_step_by_step(scenario, replicas):
    work, cfg, blocks, cost, _ = scenario
    kw = dict(replicas=replicas, router="round_robin")
    stepped = simulate(work, cfg, COSTS[cost], blocks, fast_forward=False, **kw)
    fast = simulate(work, cfg, COSTS[cost], blocks, fast_forward=True, **kw)
    assert_same(stepped, fast)


def decisions_per_request(replicas: int) -> float:
    """The same per-replica load over `replicas` replicas: each sees a Poisson stream of
    2 requests/s of long replies."""
    rng = np.random.default_rng(5)
    n = 40 * replicas
    arrivals = np.cumsum(rng.exponential(1 / (2.0 * replicas), n))
    work = Workload(arrivals, rng.integers(50, 500, n), rng.integers(100, 600, n))
    with counting_decisions() as d:
        simulate(work, SchedulerConfig(policy="continuous"), COSTS["roofline"], 20_000,
                 replicas=replicas, router="round_robin")
    return d[0] / n


def test_decisions_per_request_do_not_grow_with_replicas():
    """Every arrival ending every replica's run made this grow about with the replicas
    (each arrival a decision on each busy replica)."""
    one, many = decisions_per_request(1), decisions_per_request(16)
    assert many < 1.3 * one, (one, many)


@given(st.integers(1, 6), st.integers(0, 25), st.integers(0, 5))
def test_next_time_for_is_the_next_arrival_dealt_to_the_replica(every, pulled, first):
    first %= every
    times = np.sort(np.random.default_rng(pulled).uniform(0, 10, 25))
    a = Arrivals(simpy.Environment(), Workload(times, np.ones(25, np.int64), np.ones(25, np.int64)),
                 lambda request, now: None)
    cut = times[pulled - 1] if pulled else -1.0
    a.pull(cut)  # requests up to and including index pulled - 1 (times are distinct)
    left = [i for i in range(25) if times[i] > cut and i % every == first]
    want = float(times[left[0]]) if left else math.inf
    assert a.next_time_for(first, every) == want
