"""Requests dealt round robin (sim/arrivals.py deal_to): the idle replicas share one alarm,
at the earliest of their next arrivals (Arrivals.sleep), where each kept one of its own
(a heap of 100,000 waits at 100,000 replicas). The same runs to the bit as each keeping
its own (arrivals.DEALT_ALARM = False): request rows, step table, gaps and the run's
simulated time, over bursts, idle gaps whose alarm sums round off the arrival's time,
rejected requests and policies with a deadline of their own; never more waits."""
from __future__ import annotations

import sys

import numpy as np
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.workload import Workload
from batchlab.sim import arrivals, simulate
from batchlab.sim.counting import counting_events
from batchlab.sim.resumption import EventQueue
from tests.same_runs import assert_identical, switched

COST = LinearCostModel(0.004, {"prefill_tokens": 2e-5, "num_seqs": 1e-4, "kv_tokens_read": 1e-7})


def run(w: Workload, shared: bool, **kw):
    """Replicas interleaved (apart, sim/apart.py, each is alone: nothing is dealt)."""
    with switched(arrivals, "DEALT_ALARM", shared), counting_events() as events, \
            switched(sys.modules["batchlab.sim.simulate"], "APART", False):
        r = simulate(w, **kw)
    return r, events[0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 80), rate=st.sampled_from([0.05, 0.5, 5.0, 50.0]),
       burst=st.booleans(), policy=st.sampled_from(["continuous", "chunked", "static"]),
       replicas=st.integers(2, 7), fast_forward=st.booleans(), seats=st.sampled_from([2, 8]),
       long_prompts=st.booleans())
def test_one_alarm_for_the_sleepers_runs_as_one_each(seed, n, rate, burst, policy, replicas, fast_forward,
                                                      seats, long_prompts):
    rng = np.random.default_rng(seed)
    # Idle gaps of every length: an alarm set at an early `now` for a late arrival sums to
    # now + (t - now), an ulp off t about once in a hundred.
    t = np.cumsum(rng.exponential(1 / rate, n) * rng.choice([0.01, 1.0, 30.0], n))
    if burst:  # several requests at one instant, and at the first
        t = np.floor(t * 2) / 2
        t[0] = 0.0
    prompts = rng.integers(1, 1200 if long_prompts else 300, n)  # over 40 blocks of 16: rejected
    w = Workload(t, prompts, rng.integers(1, 40, n))
    kw = dict(scheduler=SchedulerConfig(policy=policy, max_num_seqs=seats), cost=COST,
              num_kv_blocks=40, replicas=replicas, router="round_robin", fast_forward=fast_forward)
    shared, shared_events = run(w, True, **kw)
    own, own_events = run(w, False, **kw)
    assert_identical(shared, own)
    assert shared_events <= own_events


def test_many_idle_replicas():
    """400 replicas, a request each now and then."""
    n = 800
    w = Workload(np.arange(n) * 0.25, np.full(n, 32), np.full(n, 4))
    kw = dict(scheduler=SchedulerConfig(policy="continuous"), cost=COST, num_kv_blocks=400,
              replicas=400, router="round_robin")
    shared, shared_events = run(w, True, **kw)
    own, own_events = run(w, False, **kw)
    assert_identical(shared, own)
    assert shared_events <= own_events


def test_the_sleepers_wait_on_one_alarm():
    """100 engines asleep: one wait on the queue, at the earliest of their next arrivals."""
    env = simpy.Environment()
    n = 300
    w = Workload(np.arange(n) * 0.5 + 1.0, np.full(n, 8), np.full(n, 2))
    a = arrivals.Arrivals(env, w, lambda r, when: None)
    a.queue = EventQueue(env)
    a.deal_to([Sink() for _ in range(100)])
    for k in reversed(range(100)):
        assert a.sleep(k, 0.0)
        assert len(a.queue.heap) == 1 and a.queue.first_time() == w.arrival[k]


class Sink:
    def submit(self, request, now) -> None:
        pass


def test_a_sleeper_whose_alarm_sum_misses_the_arrival_keeps_its_own():
    """now + (t - now) != t for these: sleep() leaves the engine its own alarm (False)."""
    now, t = 0.07371957906335957, 18.212876686771633
    assert now + (t - now) != t
    env = simpy.Environment()
    w = Workload(np.array([0.0, t]), np.full(2, 8), np.full(2, 2))
    a = arrivals.Arrivals(env, w, lambda r, when: None)
    a.queue = EventQueue(env)
    a.deal_to([Sink(), Sink()])
    a.pull(0.0)  # request 0 to engine 0; request 1 will go to engine 1
    assert a.sleep(1, now) is False and not a.asleep[1]
    assert a.sleep(1, 1.0) is True and a.asleep[1]  # 1.0 + (t - 1.0) == t
    assert a.queue.first_time() == t
    assert a.sleep(0, 1.0) is True and a.queue.first_time() == t  # nothing more comes to it
