"""Scheduler invariants under random workloads and settings, for every policy."""
from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.config import SchedulerConfig
from core.request import Request, Status
from core.schedulers import SCHEDULERS, make_scheduler
from tests.driver import drive

POLICIES = sorted(SCHEDULERS)


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 25))
    reqs = []
    t = 0.0
    for i in range(n):
        t += draw(st.sampled_from([0.0, 0.0, 0.5, 1.0, 3.0, 20.0]))
        reqs.append(Request(id=i, arrival=t, prompt_len=draw(st.integers(1, 80)),
                            output_len=draw(st.integers(1, 40)), priority=draw(st.integers(0, 3))))
    return reqs


@st.composite
def configs(draw, policy=None):
    block_size = draw(st.sampled_from([1, 4, 16]))
    kv_tokens = draw(st.integers(24, 400))  # small, so preemption and rejection happen
    return SchedulerConfig(
        policy=policy or draw(st.sampled_from(POLICIES)),
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=draw(st.sampled_from([None, 16, 64, 200])),
        block_size=block_size,
        admission=draw(st.sampled_from(["fcfs", "priority", "shortest_prompt"])),
        preemption=draw(st.sampled_from(["recent", "priority"])),
        max_batch_delay_s=draw(st.sampled_from([0.0, 0.0, 2.5])),
    ), max(2, kv_tokens // block_size)


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
    budget = getattr(sched, "token_budget", None)
    if budget and sched.name == "chunked":
        assert batch.total_tokens <= budget


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(workloads(), configs())
def test_every_request_finishes_once_with_its_tokens(reqs, cfg_blocks):
    cfg, blocks = cfg_blocks
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
        too_big_step = cfg.policy == "continuous" and s.request.prompt_len > sched.token_budget
        assert too_big_kv or too_big_step
    assert sched.kv.num_free == blocks


def _head_fits(sched):
    head = sched._peek()
    if head is None or len(sched.running) >= sched.max_seqs:
        return {"head": None}
    fits = head.known <= sched.token_budget and sched.kv.can_grow(head.block_table, head.known)
    return {"head": head if fits else None}


@SETTINGS
@given(workloads(), configs(policy="continuous"))
def test_continuous_never_leaves_a_seat_empty_when_the_head_fits(reqs, cfg_blocks):
    cfg, blocks = cfg_blocks

    def check(sched, batch, state):
        check_invariants(sched, batch, state)
        if state["head"] is not None:
            assert state["head"] in batch.seqs, "a free seat stayed empty while a request fit"

    drive(make_scheduler(cfg, blocks), reqs, before=_head_fits, check=check)


@SETTINGS
@given(workloads(), configs(policy="static"))
def test_static_admits_nobody_until_the_whole_batch_is_done(reqs, cfg_blocks):
    cfg, blocks = cfg_blocks

    def before(sched):
        return {"running": set(map(id, sched.running))}

    def check(sched, batch, state):
        check_invariants(sched, batch, state)
        if state["running"]:
            assert {id(s) for s in batch.seqs} <= state["running"], "joined a running static batch"

    drive(make_scheduler(cfg, blocks), reqs, before=before, check=check)


@SETTINGS
@given(workloads(), configs())
def test_schedulers_are_deterministic(reqs, cfg_blocks):
    cfg, blocks = cfg_blocks

    def trace():
        log = []
        drive(make_scheduler(cfg, blocks), reqs,
              check=lambda s, b, _: log.append((tuple(x.id for x in b.seqs), tuple(b.num_tokens),
                                                tuple(x.id for x in b.preempted))))
        return log

    assert trace() == trace()


def test_chunked_admits_only_a_prompt_that_fits_whole():
    """A prompt whose first chunk fits but whole does not waits: admitted, it would be
    the next victim as the decoder grows, readmitted into the blocks it freed, and
    preempted again, recomputing its chunks over and over."""
    cfg = SchedulerConfig(policy="chunked", max_num_seqs=4, max_num_batched_tokens=8, block_size=4)
    sched = make_scheduler(cfg, 10)  # 40 tokens of KV
    decoder = Request(id=0, arrival=0.0, prompt_len=8, output_len=20)  # up to 7 blocks
    long = Request(id=1, arrival=0.0, prompt_len=32, output_len=2)  # 8 blocks
    finished, rejected, _ = drive(sched, [decoder, long])
    assert [s.id for s in finished] == [0, 1] and not rejected
    assert sched.num_preemptions == 0
