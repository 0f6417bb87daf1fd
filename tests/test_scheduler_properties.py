"""Scheduler invariants under random workloads and settings, for every registered
policy, admission order, victim order and KV allocation mode, with each policy's
declared parameters drawn from their ranges (tests/draws.py; focus one policy with
BATCHLAB_TEST_POLICY=NAME or pytest --policy NAME)."""
from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.request import Request, Status
from batchlab.core.schedulers import make_scheduler
from batchlab.core.schedulers.chunked import ChunkedPrefillScheduler
from batchlab.core.schedulers.continuous import ContinuousScheduler
from batchlab.core.schedulers.static import StaticScheduler
from tests.draws import admission_orders, configs, policies, registered, requests, victim_orders
from tests.driver import drive


@st.composite
def scenarios(draw, among=None):
    names = policies(among)
    if not names:
        pytest.skip("the focused policy is not one this test is about")
    reqs = draw(requests())
    cfg, blocks = draw(configs(reqs, policy=draw(st.sampled_from(names))))
    return reqs, cfg, blocks


def family(base: type) -> list[str]:
    return [n for n, cls in registered().items() if issubclass(cls, base)]


def check_invariants(sched, batch, _state):
    kv = sched.kv
    running = sched.running
    # No sequence in two seats, never more than the seats.
    assert len({id(s) for s in batch.seqs}) == len(batch.seqs)
    assert len({id(s) for s in running}) == len(running) <= sched.max_seqs
    # KV blocks conserved: free + held by running == pool; no block in two tables.
    held = [b for s in running for b in s.block_table]
    assert len(held) == len(set(held))
    assert kv.num_free + len(held) == kv.num_blocks
    for s in sched.waiting():
        assert s.block_table == [] and s.status is Status.WAITING
    # Each running sequence holds exactly the blocks for its computed tokens.
    for s in running:
        assert len(s.block_table) * kv.block_size >= s.num_computed
        assert s.num_generated < s.request.output_len
    if isinstance(sched, ChunkedPrefillScheduler):
        assert batch.total_tokens <= sched.token_budget
    if sched.config.kv_allocation == "reserved":
        # Whole budgets fit together, so nobody is ever preempted.
        assert not batch.preempted
        assert sched.reservation.blocks <= kv.num_blocks


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenarios())
def test_every_request_finishes_once_with_its_tokens(scenario):
    reqs, cfg, blocks = scenario
    sched = make_scheduler(cfg, blocks)
    finished, rejected, _ = drive(sched, reqs, check=check_invariants)
    ids = Counter(s.id for s in finished + rejected)
    assert ids == Counter(r.id for r in reqs), "a request was lost or finished twice"
    for s in finished:
        assert s.num_generated == s.request.output_len
        assert s.status is Status.FINISHED and s.block_table == []
    for s in rejected:
        assert s.reject_reason
        # Rejected only if it could never fit, whatever else is running.
        too_big_kv = -(-s.request.max_kv_tokens // cfg.block_size) > blocks
        too_big_step = isinstance(sched, ContinuousScheduler) and s.request.prompt_len > sched.token_budget
        assert too_big_kv or too_big_step
    assert sched.kv.num_free == blocks
    assert sched.reservation.blocks == 0


def _head_fits(sched):
    head = sched._peek()
    if head is None or len(sched.running) >= sched.max_seqs:
        return {"head": None}
    fits = (head.known <= sched.token_budget and sched.kv.can_grow(head.block_table, head.known)
            and sched.reservation.fits(head) and not sched.holds_back(head))
    return {"head": head if fits else None}


@SETTINGS
@given(scenarios(among=family(ContinuousScheduler)))
def test_continuous_never_leaves_a_seat_empty_when_the_head_fits(scenario):
    reqs, cfg, blocks = scenario

    def check(sched, batch, state):
        check_invariants(sched, batch, state)
        if state["head"] is not None:
            assert state["head"] in batch.seqs, "a free seat stayed empty while a request fit"

    drive(make_scheduler(cfg, blocks), reqs, before=_head_fits, check=check)


@SETTINGS
@given(scenarios(among=family(StaticScheduler)))
def test_static_admits_nobody_until_the_whole_batch_is_done(scenario):
    reqs, cfg, blocks = scenario

    def before(sched):
        return {"running": set(map(id, sched.running))}

    def check(sched, batch, state):
        check_invariants(sched, batch, state)
        if state["running"]:
            assert {id(s) for s in batch.seqs} <= state["running"], "joined a running static batch"

    drive(make_scheduler(cfg, blocks), reqs, before=before, check=check)


def test_memory_aware_admits_no_long_prompt_while_kv_is_busy():
    """Its thresholds, drawn from their declared ranges, are crossed: some runs hold a
    long prompt back, and none admits one while KV use is above the threshold."""
    if not policies(["memory_aware"]):
        pytest.skip("the focused policy is not memory_aware")
    seen = {"held": 0}

    # Whether some drawn run crosses the thresholds is a property of the draws, not of the
    # code: with fresh random draws about 1 run in 6 crossed none (a flaky test). Fixed
    # draws make it a reproducible check; 300 of them cross the thresholds many times.
    @settings(SETTINGS, max_examples=300, derandomize=True, database=None)
    @given(scenarios(among=["memory_aware"]))
    def check_runs(scenario):
        reqs, cfg, blocks = scenario

        def before(sched):
            p, kv = sched.params, sched.kv
            busy = bool(sched.running) and kv.num_used > p.kv_threshold * kv.num_blocks
            return {"busy": busy, "running": set(map(id, sched.running)), "long": p.long_prompt}

        def check(sched, batch, state):
            check_invariants(sched, batch, state)
            admitted = [s for s in batch.seqs if id(s) not in state["running"]]
            if state["busy"]:
                assert all(s.request.prompt_len < state["long"] for s in admitted), \
                    "admitted a long prompt while KV use was above the threshold"
                head = sched._peek()
                seen["held"] += head is not None and sched.holds_back(head)

        drive(make_scheduler(cfg, blocks), reqs, before=before, check=check)

    check_runs()
    assert seen["held"] > 0, "the drawn thresholds were never crossed"
    print(f"memory_aware held a long prompt back in {seen['held']} steps")


@SETTINGS
@given(scenarios())
def test_schedulers_are_deterministic(scenario):
    reqs, cfg, blocks = scenario

    def trace():
        log = []
        drive(make_scheduler(cfg, blocks), reqs,
              check=lambda s, b, _: log.append((tuple(x.id for x in b.seqs), tuple(b.num_tokens),
                                                tuple(x.id for x in b.preempted))))
        return log

    assert trace() == trace()


def test_the_draws_reach_every_registered_order_and_mode():
    """Nothing registered is left out of the draws above (they read the registries)."""
    seen = {"admission": set(), "preemption": set(), "kv_allocation": set(), "policy": set()}

    @settings(max_examples=300, deadline=None, database=None)
    @given(scenarios())
    def collect(scenario):
        cfg = scenario[1]
        for k in seen:
            seen[k].add(getattr(cfg, k))

    collect()
    assert seen["admission"] == set(admission_orders()) and seen["preemption"] == set(victim_orders())
    assert seen["kv_allocation"] == {"paged", "reserved"} and seen["policy"] == set(policies())


def test_chunked_admits_only_a_prompt_that_fits_whole():
    """A prompt whose first chunk fits but whole does not waits: admitted, it would be
    the next victim as the decoder grows, readmitted into the blocks it just freed, and
    preempted again, recomputing its chunks over and over."""
    cfg = SchedulerConfig(policy="chunked", max_num_seqs=4, max_num_batched_tokens=8, block_size=4)
    sched = make_scheduler(cfg, 10)  # 40 tokens of KV
    decoder = Request(id=0, arrival=0.0, prompt_len=8, output_len=20)  # up to 7 blocks
    long = Request(id=1, arrival=0.0, prompt_len=32, output_len=2)  # 8 blocks
    finished, rejected, _ = drive(sched, [decoder, long])
    assert [s.id for s in finished] == [0, 1] and not rejected
    assert sched.num_preemptions == 0
