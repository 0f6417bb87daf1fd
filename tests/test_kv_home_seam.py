"""The KV home seam (core/kv_home.py): where a sequence's computed KV lives is said in
one place. KV kept in a second tier on preemption (swapping), or computed on another
replica before a hand-off, needs a new KVHome (or a count on the sequence) and nothing
else: admission gives the sequence blocks for that KV and counts it computed, its step
runs only the rest, and the simulator prices the load with the home beside the step."""
from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings, strategies as st

from batchlab.core.batch import step_features
from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.kv_home import RECOMPUTE, KVHome
from batchlab.core.metrics import MetricsRecorder
from batchlab.core.request import Request, Sequence, Status
from batchlab.core.schedulers import all_policies, make_scheduler
from tests.stepping import step_through
from batchlab.sim.engine import Replica

PRICE = LinearCostModel(intercept=0.001, coef={"prefill_tokens": 0.0001, "decode_tokens": 0.001})
LOAD_S_PER_TOKEN = 1e-5


class Swap(KVHome):
    """A second tier that keeps every computed token of a preempted sequence."""

    def evicted(self, seq: Sequence) -> int:
        return seq.num_computed

    def load_seconds(self, tokens: int) -> float:
        return tokens * LOAD_S_PER_TOKEN


class Leaky(KVHome):
    def evicted(self, seq: Sequence) -> int:
        return seq.num_computed + 1  # more than it computed: refused


def _serve(policy: str, home: KVHome, reqs: list[tuple[int, int]], blocks: int, seats: int = 4):
    """Serve reqs (all at 0) with `home`; each step priced by the cost model plus the
    home's load time: the steps (batch, features, seconds, items) and the sequences."""
    cfg = SchedulerConfig(policy=policy, max_num_seqs=seats, block_size=4, max_num_batched_tokens=64)
    sched = make_scheduler(cfg, blocks)
    sched.kv_home = home
    seqs = [sched.add(Request(i, 0.0, p, o), 0.0) for i, (p, o) in enumerate(reqs)]
    steps = step_through(sched, lambda batch, f: PRICE.step_time(f) + home.load_seconds(batch.kv_loaded))
    return steps, seqs


# Three long replies on a pool that holds two: the third's decodes preempt.
TIGHT = ([(30, 40), (30, 40), (30, 40)], 40)


def test_a_swapped_sequence_loads_its_kv_and_runs_only_the_rest():
    steps, seqs = _serve("chunked", Swap(), *TIGHT)
    preempted = {id(s) for b, _, _, _ in steps for s in b.preempted}
    assert preempted, "the pool is meant to be too small for all three"
    loads = [(b, f, dt, items) for b, f, dt, items in steps if b.kv_loaded]
    assert loads
    for b, f, dt, items in loads:
        # Its first step back starts where its KV ends: nothing it had computed runs again.
        back = [(s, start) for s, start, _, _ in items if id(s) in preempted and start > 0]
        assert back and sum(start for _, start in back) >= b.kv_loaded
        assert dt == pytest.approx(PRICE.step_time(f) + b.kv_loaded * LOAD_S_PER_TOKEN)
    assert all(s.status is Status.FINISHED and s.num_generated == s.request.output_len for s in seqs)


def test_swapping_computes_less_than_recomputing_the_same_work():
    swapped, _ = _serve("chunked", Swap(), *TIGHT)
    recomputed, _ = _serve("chunked", RECOMPUTE, *TIGHT)
    assert not any(b.kv_loaded for b, _, _, _ in recomputed)
    assert sum(f.prefill_tokens for _, f, _, _ in swapped) < sum(f.prefill_tokens for _, f, _, _ in recomputed)


def test_a_handed_off_sequence_starts_from_the_kv_it_arrives_with():
    """A decode replica receiving a request whose prompt was prefilled elsewhere: the KV
    of all but its last prompt token comes over the link, and one token runs."""
    cfg = SchedulerConfig(policy="continuous", max_num_seqs=4, block_size=4)
    sched = make_scheduler(cfg, 64)
    seq = sched.add(Request(0, 0.0, 25, 3), 0.0)
    seq.kv_elsewhere = 24
    batch = sched.schedule(0.0)
    assert batch.kv_loaded == 24 and batch.starts == [24] and batch.num_tokens == [1]
    assert len(seq.block_table) == 7  # 25 tokens in blocks of 4
    f = step_features(batch)
    assert (f.prefill_tokens, f.kv_tokens_read) == (1, 25)
    sched.complete(batch, 1.0)
    assert seq.num_generated == 1 and seq.kv_elsewhere == 0


def test_keeping_more_than_was_computed_is_refused():
    cfg = SchedulerConfig(policy="chunked", max_num_seqs=4, block_size=4, max_num_batched_tokens=64)
    sched = make_scheduler(cfg, 12)
    sched.kv_home = Leaky()
    for i in range(3):
        sched.add(Request(i, 0.0, 12, 30), 0.0)
    with pytest.raises(ValueError, match=r"Leaky.evicted kept \d+ tokens of \d+ computed"):
        for _ in range(200):
            sched.complete(sched.schedule(0.0), 0.0)


def test_the_simulator_prices_a_load_with_the_home():
    """Through the simulator's engine: each step's duration is the cost model's price
    plus the home's load time, and only steps that load pay it."""
    cfg = SchedulerConfig(policy="chunked", max_num_seqs=4, block_size=4, max_num_batched_tokens=64)
    env = simpy.Environment()
    rec = MetricsRecorder()
    sched = make_scheduler(cfg, TIGHT[1])
    sched.kv_home = Swap()
    loaded = []
    replica = Replica(env, 0, sched, PRICE, rec, lambda seq: None,
                      observer=lambda i, start, took, b: loaded.append((took, b.kv_loaded)))
    for i, (p, o) in enumerate(TIGHT[0]):
        replica.submit(Request(i, 0.0, p, o), 0.0)
    env.run()
    steps = rec.step_table()
    assert any(n for _, n in loaded)
    for row, (took, n) in enumerate(loaded):
        features = {k: int(steps[k][row]) for k in ("num_seqs", "num_prefill_seqs", "prefill_tokens",
                                                    "decode_tokens", "kv_tokens_read", "attention_pairs")}
        price = PRICE.intercept + 0.0001 * features["prefill_tokens"] + 0.001 * features["decode_tokens"]
        assert took == pytest.approx(price + n * LOAD_S_PER_TOKEN)


@settings(max_examples=40, deadline=None)
@given(reqs=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 30)), min_size=1, max_size=8),
       policy=st.sampled_from(sorted(all_policies())), blocks=st.integers(12, 40))
def test_any_home_serves_every_reply_whole(reqs, policy, blocks):
    """Swapped or recomputed, every reply ends at its length, the pool comes back whole
    (checked each step in _serve), and a step loads only what preemptions kept."""
    steps, seqs = _serve(policy, Swap(), reqs, blocks)
    for s in seqs:
        assert s.status in (Status.FINISHED, Status.REJECTED)
        if s.status is Status.FINISHED:
            assert s.num_generated == s.request.output_len
    kept = sum(1 for b, _, _, _ in steps for _ in b.preempted)
    assert bool(kept) or not any(b.kv_loaded for b, _, _, _ in steps)
