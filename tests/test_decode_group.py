"""The lazy decode group (core/decode_group.py) against the plain per-step arithmetic."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.batch import StepFeatures
from batchlab.core.cost.dispatch import roofline
from batchlab.core.decode_group import DecodeGroup
from batchlab.core.kv import BlockManager, blocks_for
from batchlab.core.request import Request, Sequence, Status
from batchlab.core.model.presets import lookup_hardware, lookup_model

COST = roofline(lookup_model("llama-3-8b"), lookup_hardware("a100-80gb"), 1, 0.8, 0.6, 0.002)


@st.composite
def groups(draw):
    bs = draw(st.sampled_from([1, 2, 4, 16]))
    members = draw(st.lists(st.tuples(st.integers(1, 60), st.integers(1, 40), st.integers(1, 40)),
                            min_size=1, max_size=12))
    ticks_before = draw(st.integers(0, 20))  # the group's clock when they join
    return bs, members, ticks_before, draw(st.integers(0, 400))


def build(bs: int, members, ticks_before: int, num_blocks: int = 2000):
    """A group whose members joined after a prefill (tight tables), at tick ticks_before."""
    kv = BlockManager(num_blocks, bs)
    group = DecodeGroup(bs, lambda s: (s.admit_order,))
    group.tick = ticks_before
    seqs = []
    for i, (prompt, done, left) in enumerate(members):
        seq = Sequence(Request(i, 0.0, prompt, done + left))
        seq.status, seq.decoding, seq.admit_order = Status.RUNNING, True, i
        seq.num_computed, seq.num_generated = prompt + done - 1, done
        kv.grow(seq.block_table, seq.num_computed)
        group.join(seq)
        seqs.append(seq)
    return group, kv, seqs


def step_by_step(group: DecodeGroup, kv: BlockManager, m: int):
    """m single steps: the blocks in use after each step's allocation, and who finishes
    when, with their state then (before their blocks are freed)."""
    used, done = [], []
    for j in range(1, m + 1):
        assert group.reserve(kv)
        used.append(kv.num_used)
        for seq in group.step():
            done.append((seq.id, j, state(seq)))
            kv.free(seq.block_table)
    return used, done


def state(seq: Sequence) -> tuple:
    return seq.num_computed, seq.num_generated, len(seq.block_table)


def built(case):
    """A drawn case's group, KV cache and members (build), and the steps until every
    member finishes."""
    bs, members, ticks, _ = case
    group, kv, seqs = build(bs, members, ticks)
    return group, kv, seqs, group.steps_left()[1]


@settings(max_examples=150, deadline=None)
@given(groups())
def test_a_run_equals_its_steps(case):
    bs, members, ticks, _ = case
    a, kv_a, seqs_a = build(bs, members, ticks)
    b, kv_b, seqs_b = build(bs, members, ticks)
    m = b.steps_left()[1]  # through every finish
    assert a.reserve(kv_a)
    used_a, done_a = a.advance(m, kv_a)
    used_b, done_b = step_by_step(b, kv_b, m)
    assert used_a == used_b
    assert [(s.id, j, state(s)) for s, j in done_a] == done_b
    for seq, j in done_a:  # finished exactly, holding the blocks their tokens need
        assert seq.num_generated == seq.request.output_len
        assert len(seq.block_table) == blocks_for(seq.num_computed, bs)
    assert a.size == b.size == 0 and not a.owed and not b.owed
    c, kv_c, _ = build(bs, members, ticks)  # without rows: the blocks in use summed over the steps
    assert c.reserve(kv_c)
    total_c, done_c = c.advance(m, kv_c, rows=False)
    assert total_c == [sum(used_b)]
    assert [(s.id, j, state(s)) for s, j in done_c] == done_b


@settings(max_examples=150, deadline=None)
@given(groups(), st.integers(1, 30))
def test_release_mid_run_gives_the_stepped_counters(case, m):
    bs, members, ticks, _ = case
    a, kv_a, seqs_a = build(bs, members, ticks)
    b, kv_b, seqs_b = build(bs, members, ticks)
    m = min(m, a.steps_left()[1])
    assert a.reserve(kv_a)
    _, done_a = a.advance(m, kv_a)
    for seq, _ in done_a:
        kv_a.free(seq.block_table)
    step_by_step(b, kv_b, m)
    a.release(), b.release()
    assert [state(s) for s in seqs_a] == [state(s) for s in seqs_b]
    assert kv_a.num_used == kv_b.num_used
    assert not a.owed and not b.owed


@settings(max_examples=150, deadline=None)
@given(groups())
def test_kv_steps_is_the_longest_run_the_free_blocks_allow(case):
    bs, free = case[0], case[3]
    group, kv, seqs, m = built(case)
    j = group.kv_steps(m, free)
    # A direct count: blocks member i needs over steps 2..j (step 1 is reserved).
    def need(j):
        total = 0
        for seq in seqs:
            left = seq.request.output_len - seq.num_generated
            steps = min(j, left)
            total += blocks_for(seq.num_computed + steps, bs) - blocks_for(seq.num_computed + 1, bs)
        return total
    assert 1 <= j <= m
    assert j == 1 or need(j) <= free
    assert j == m or need(j + 1) > free


@settings(max_examples=100, deadline=None)
@given(groups())
def test_price_is_step_time_of_each_step(case):
    group, _, seqs, k = built(case)
    run = group.price(COST, k)
    for j in range(1, k + 1):
        alive = [s for s in seqs if s.request.output_len - s.num_generated >= j]
        kv = sum(s.num_computed + j for s in alive)
        assert run.num_seqs[j - 1] == len(alive) and run.kv_read[j - 1] == kv
        want = COST.step_time(StepFeatures(len(alive), 0, 0, len(alive), kv, kv))
        assert abs(run.durations[j - 1] - want) <= 1e-12 * want
    assert run.sizes_by_step() == run.num_seqs  # the stretches say the same sizes
    bare = group.price(COST, k, rows=False)  # no lists a step; the rest the same
    assert bare.durations == run.durations and not bare.num_seqs and not bare.kv_read
    assert (bare.sizes, bare.ends) == (run.sizes, run.ends) and bare.sizes_by_step() == run.num_seqs
    # a first step priced from its own features (after a prefill, after idling) alike
    assert group.price(COST, k, (1, 1), rows=False).durations == group.price(COST, k, (1, 1)).durations


@settings(max_examples=150, deadline=None)
@given(groups(), st.integers(1, 60))
def test_taken_sums_are_the_sums_of_the_blocks_taken(case, m):
    group, _, _, last = built(case)
    m = min(m, last)
    taken = group._taken(m)
    assert group._taken_sums(m) == (sum(taken), sum(d * (m - i) for i, d in enumerate(taken)))
