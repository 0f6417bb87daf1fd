"""Fast-forward over steady decode runs gives exactly the step-by-step answer."""
from __future__ import annotations

import sys


import numpy as np
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchlab.core.batch import Batch
from batchlab.core.config import SchedulerConfig
from batchlab.core.kv_reservation import KV_ALLOCATIONS
from batchlab.core.schedulers import SCHEDULERS, policy_class
from batchlab.core.schedulers.continuous import ContinuousScheduler
from batchlab.core.workload import Workload
from batchlab.sim import simulate
from batchlab.sim.resumption import moved_on
from batchlab.sim.counting import counting_decisions, counting_events
from tests.draws import admission_orders, params, policies, victim_orders
from tests.same_runs import COSTS, assert_same, switched


@st.composite
def scenarios(draw):
    long = draw(st.booleans())  # a few requests of realistic length, or many short ones
    n = draw(st.integers(1, 10 if long else 40))
    rate = draw(st.sampled_from([2.0, 20.0, 200.0, float("inf")]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    arrivals = np.zeros(n) if np.isinf(rate) else np.concatenate(([0.0], np.cumsum(rng.exponential(1 / rate, n - 1))))
    closed = draw(st.sampled_from([None, None, 3]))
    prompts = draw(st.sampled_from([20, 300] + ([4096] if long else [])))
    outputs = draw(st.sampled_from([10, 120] + ([2048] if long else [])))
    work = Workload(arrivals, rng.integers(1, prompts, n), rng.integers(1, outputs, n),
                    priority=rng.integers(0, 3, n), max_concurrency=closed,
                    think_time_s=draw(st.sampled_from([0.0, 0.05])))
    # Every registered policy, order and KV mode, with drawn parameters: a new one that
    # claims fast-forward is checked here.
    name = draw(st.sampled_from(policies()))
    block_size = draw(st.sampled_from([1, 4, 16]))
    cfg = SchedulerConfig(
        policy=name,
        max_num_seqs=draw(st.integers(1, 12)),
        max_num_batched_tokens=draw(st.sampled_from([None, 8, 64, 512])),  # 8: fewer than the decoders
        block_size=block_size,
        admission=draw(st.sampled_from(admission_orders())),
        preemption=draw(st.sampled_from(victim_orders())),
        max_batch_delay_s=draw(st.sampled_from([0.0, 0.05])),
        kv_allocation=draw(st.sampled_from(KV_ALLOCATIONS)),
        params=draw(params(policy_class(name).Params)),
    )
    kv_tokens = draw(st.integers(40, 3000)) * (8 if long else 1)
    blocks = max(2, kv_tokens // cfg.block_size)
    return work, cfg, blocks, draw(st.sampled_from(sorted(COSTS))), draw(st.sampled_from([1, 1, 2]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_fast_forward_equals_step_by_step(scenario):
    work, cfg, blocks, cost, replicas = scenario
    kw = dict(replicas=replicas, router="least_loaded")
    stepped = simulate(work, cfg, COSTS[cost], blocks, fast_forward=False, **kw)
    fast = simulate(work, cfg, COSTS[cost], blocks, fast_forward=True, **kw)
    assert_same(stepped, fast)


def count_decisions(work: Workload, fast_forward: bool) -> int:
    with counting_decisions() as n:
        simulate(work, SchedulerConfig(policy="continuous", max_num_seqs=16), COSTS["roofline"],
                 100_000, fast_forward=fast_forward)
    return n[0]


def test_fast_forward_decisions_do_not_grow_with_reply_length():
    """Engine iterations scale with scheduling decisions (arrivals, finishes), not with
    tokens."""
    rng = np.random.default_rng(0)
    prompts, outputs = rng.integers(10, 100, 64), rng.integers(100, 400, 64)
    short = Workload(np.zeros(64), prompts, outputs)
    long = Workload(np.zeros(64), prompts, outputs * 4)
    stepped = count_decisions(short, False), count_decisions(long, False)
    fast = count_decisions(short, True), count_decisions(long, True)
    assert stepped[1] > 3.5 * stepped[0]
    assert fast[1] < 1.2 * fast[0]
    assert fast[0] < 5 * 64  # a handful of decisions per request


def test_an_engine_alone_takes_no_event_a_step():
    """SimPy events only where the model needs them: one replica with nothing else due
    before its step ends moves the clock on without one (so do two round-robin replicas
    run apart); two interleaved, a second replica's steps are events the first must wait
    behind, and results equal stepping either way (the property test above, with replicas)."""
    rng = np.random.default_rng(2)
    work = Workload(np.zeros(32), rng.integers(10, 100, 32), rng.integers(50, 200, 32))
    cfg = SchedulerConfig(policy="continuous", max_num_seqs=8)
    # Round-robin replicas run apart (sim/apart.py) are each alone.
    for replicas, apart, most in ((1, True, 2), (2, True, 4), (2, False, None)):
        with counting_events() as events, counting_decisions() as decisions, \
                switched(sys.modules["batchlab.sim.simulate"], "APART", apart):
            r = simulate(work, cfg, COSTS["roofline"], 10_000, fast_forward=False, replicas=replicas)
        assert decisions[0] == r.summary()["num_steps"] > 100
        if most is not None:
            assert events[0] <= most, events[0]
        else:  # two engines interleave: an event wherever the other is due first
            assert events[0] > r.summary()["num_steps"] / 4, events[0]


def test_moved_on_only_where_nothing_is_due_first():
    env = simpy.Environment(initial_time=1.0)
    assert moved_on(env, 0.25) and env.now == 1.0 + 0.25  # nothing scheduled
    env.timeout(0.5)  # due at 1.75
    assert not moved_on(env, 0.5) and env.now == 1.25  # a tie: the earlier-scheduled event first
    assert not moved_on(env, 0.75) and env.now == 1.25
    assert moved_on(env, 0.1 + 0.2) and env.now == 1.25 + (0.1 + 0.2)  # SimPy's own sum


class PacedAdmission(ContinuousScheduler):
    """Admits at most one request per 50 ms of simulated time: a decision that depends
    on `now`, so it cannot promise the fast-forward contract. It does not claim it, and
    its parent's claim is not inherited."""
    name = "paced_admission_test"

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self._next_admission = 0.0

    def schedule(self, now: float) -> Batch:
        if now >= self._next_admission and self._waiting and len(self.running) < self.max_seqs:
            batch = Batch()
            if self._admit_head(batch, now, self._peek().known):
                self._next_admission = now + 0.05
                return batch
        batch = Batch()
        self._reserve_running(batch, lambda seq: 1)
        return batch


def test_a_policy_that_does_not_claim_fast_forward_is_stepped():
    assert ContinuousScheduler.fast_forward and not PacedAdmission.fast_forward
    SCHEDULERS[PacedAdmission.name] = PacedAdmission
    try:
        rng = np.random.default_rng(1)
        work = Workload(np.zeros(30), rng.integers(10, 100, 30), rng.integers(50, 200, 30))
        cfg = SchedulerConfig(policy=PacedAdmission.name, max_num_seqs=8)
        with counting_decisions() as n:
            fast = simulate(work, cfg, COSTS["roofline"], 10_000, fast_forward=True)
        stepped = simulate(work, cfg, COSTS["roofline"], 10_000, fast_forward=False)
    finally:
        del SCHEDULERS[PacedAdmission.name]
    assert n[0] == fast.summary()["num_steps"]  # a decision for every step
    assert_same(stepped, fast)
    # Admissions really are paced: no two first steps closer than 50 ms.
    starts = np.sort(fast.requests["first_scheduled_s"])
    assert np.all(np.diff(starts) >= 0.05 - 1e-12)
