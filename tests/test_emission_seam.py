"""The emission seam (core/emission.py): how many tokens a decode runs and keeps is said
in one place. A step that runs drafts and keeps several tokens per sequence needs a new
Emission and nothing else: the scheduler reserves KV for the drafts, the features price
them as decode tokens, complete() keeps what the emission says and drops the rest, and
the metrics stamp the kept tokens with the step's end (zero gaps after the first)."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.emission import Emission
from batchlab.core.kv import blocks_for
from batchlab.core.metrics import MetricsRecorder
from batchlab.core.request import Request, Sequence, Status
from batchlab.core.schedulers import all_policies, make_scheduler
from tests.stepping import step_through


class KeepAll(Emission):
    """Every draft accepted: a step keeps all it verified."""

    def emitted(self, seq: Sequence, verified: int) -> int:
        return verified


class Drawn(Emission):
    """Accepted lengths drawn from a seeded generator (what a speculative method does)."""

    def __init__(self, width: int, seed: int) -> None:
        super().__init__(width)
        self.rng = random.Random(seed)

    def emitted(self, seq: Sequence, verified: int) -> int:
        return self.rng.randint(1, verified)


class Greedy(Emission):
    def emitted(self, seq: Sequence, verified: int) -> int:
        return verified + 1  # more than it verified: refused


# Priced per decode token and per KV token read, so the price shows what the step ran.
PRICE = LinearCostModel(intercept=0.001, coef={"decode_tokens": 0.01, "prefill_tokens": 0.0001,
                                               "kv_tokens_read": 1e-6})


def _run(policy: str, emission: Emission, reqs: list[tuple[int, int]], blocks: int = 64):
    """Serve reqs (all at 0) step by step with `emission`: the steps (batch, features,
    seconds, items as (seq, start, tokens, generated before)), the sequences, the
    recorder. Every running sequence's table covers what it has computed."""
    cfg = SchedulerConfig(policy=policy, max_num_seqs=4, block_size=4, max_num_batched_tokens=64)
    sched = make_scheduler(cfg, blocks)
    sched.use_emission(emission)
    seqs = [sched.add(Request(i, 0.0, p, o), 0.0) for i, (p, o) in enumerate(reqs)]
    rec = MetricsRecorder()

    def record(batch, f, start, end):
        rec.record_step(0, start, end, batch, f, sched.kv.num_used, sched.kv.num_blocks, 4)
        assert all(len(s.block_table) >= blocks_for(s.num_computed, 4) for s in sched.running)

    steps = step_through(sched, lambda batch, f: PRICE.step_time(f), record)
    return steps, seqs, rec


def test_a_step_of_drafts_is_priced_and_kept_through_the_seam():
    steps, (seq,), rec = _run("continuous", KeepAll(width=3), [(10, 7)])
    prefill, first, second = steps
    assert prefill[1].prefill_tokens == 10 and prefill[0].sampled == [1]  # the first token
    # A decode runs its last token and two drafts: priced as three decode tokens that
    # read the context and themselves.
    for batch, f, dt, starts in (first, second):
        assert batch.num_tokens == [3] and f.decode_tokens == 3 and f.prefill_tokens == 0
        start = starts[0][1]
        assert f.kv_tokens_read == start + 3
        assert dt == pytest.approx(0.001 + 0.03 + 1e-6 * (start + 3))
    assert first[0].sampled == [3] and second[0].sampled == [3]  # 1 + 3 + 3 = 7 tokens
    assert seq.status is Status.FINISHED and seq.num_generated == 7
    gaps, counts = rec.itl()
    # Six gaps: one per step after the first token (the step's), two zeros per decode.
    assert int(counts.sum()) == 6 and int(counts[gaps == 0].sum()) == 4


def test_a_step_keeps_what_the_emission_accepts_and_drops_the_drafts_kv():
    class KeepTwo(Emission):
        def emitted(self, seq: Sequence, verified: int) -> int:
            return min(2, verified)

    steps, (seq,), _ = _run("chunked", KeepTwo(width=4), [(6, 9)])
    decodes = [(b, starts) for b, f, _, starts in steps if f.decode_tokens]
    assert all(b.num_tokens == [4] for b, _ in decodes)
    # Each decode keeps two tokens: it starts two past the last one (the other two
    # drafts' KV was dropped), until the reply's end caps what is kept.
    assert [starts[0][1] for _, starts in decodes] == [6, 8, 10, 12]
    assert [b.sampled for b, _ in decodes] == [[2], [2], [2], [2]]
    assert seq.num_generated == 9


def test_keeping_more_than_was_verified_is_refused():
    cfg = SchedulerConfig(policy="continuous", max_num_seqs=2, block_size=4)
    sched = make_scheduler(cfg, 32)
    sched.use_emission(Greedy(width=2))
    sched.add(Request(0, 0.0, 5, 4), 0.0)
    sched.complete(sched.schedule(0.0), 1.0)  # the prefill: one position, one token
    decode = sched.schedule(1.0)  # its last token and a draft: two positions verified
    assert decode.num_tokens == [2]
    with pytest.raises(ValueError, match="Greedy.emitted kept 3 tokens of 2 verified; expected 1 to 2"):
        sched.complete(decode, 2.0)


def test_an_emission_runs_at_least_one_token():
    with pytest.raises(ValueError, match="width=0"):
        Emission(0)


def test_a_wider_emission_leaves_the_decode_group():
    cfg = SchedulerConfig(policy="continuous", max_num_seqs=2, block_size=4)
    sched = make_scheduler(cfg, 32)
    sched.keep_decodes_in_group()
    assert sched.group is not None
    sched.use_emission(Emission(1))
    assert sched.group is not None  # one token a step: the group's clock holds
    sched.use_emission(KeepAll(width=2))
    assert sched.group is None
    sched.keep_decodes_in_group()
    assert sched.group is None


@settings(max_examples=40, deadline=None)
@given(reqs=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 30)), min_size=1, max_size=8),
       policy=st.sampled_from(sorted(all_policies())), width=st.integers(1, 5), seed=st.integers(0, 99),
       blocks=st.integers(12, 60))
def test_any_emission_serves_every_reply_whole(reqs, policy, width, seed, blocks):
    """Whatever the drafts and their acceptance: every reply ends at its length, a
    decode runs the width (less what the step budget cut) and keeps 1 to what it ran,
    decodes are priced as decode tokens, every token but a reply's first has one gap,
    and the KV pool comes back whole."""
    steps, seqs, rec = _run(policy, Drawn(width, seed), reqs, blocks)
    for s in seqs:
        assert s.status in (Status.FINISHED, Status.REJECTED)
        if s.status is Status.FINISHED:
            assert s.num_generated == s.request.output_len
    for batch, f, _, items in steps:
        decoded = 0
        for (seq, start, n, before), kept in zip(items, batch.sampled):
            if before and start == seq.request.prompt_len + before - 1:  # a decode
                decoded += n
                assert 1 <= n <= width and 1 <= kept <= n
            else:
                assert kept in (0, 1)
        assert f.decode_tokens == decoded
        assert f.decode_tokens + f.prefill_tokens == batch.total_tokens
    gaps, counts = rec.itl()
    finished = [s for s in seqs if s.status is Status.FINISHED]
    assert int(counts.sum()) == sum(s.request.output_len - 1 for s in finished)


def test_the_plain_emission_is_what_every_step_did_before():
    """One token a step, said by the seam, gives the same steps as the default."""
    reqs = [(12, 9), (30, 4), (7, 15), (50, 6)]
    cfg = SchedulerConfig(policy="chunked", max_num_seqs=4, block_size=4)
    default = make_scheduler(cfg, 64).emission  # never told of an emission
    assert type(default) is Emission and default.width == 1
    told, _, rec_told = _run("chunked", Emission(), reqs)
    untold, _, rec_untold = _run("chunked", default, reqs)
    assert [(b.num_tokens, b.sampled, f, dt) for b, f, dt, _ in told] == \
        [(b.num_tokens, b.sampled, f, dt) for b, f, dt, _ in untold]
    assert all(max(b.sampled) <= 1 for b, _, _, _ in told)
    assert [list(x) for x in rec_told.itl()] == [list(x) for x in rec_untold.itl()]
