"""Prefix caching (core/prefix_cache.py, core/kv.py): block-state invariants under random
workloads whose prompts share prefixes, for every policy, and exact fast-forward."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.kv import BlockManager
from batchlab.core.prefix_cache import block_keys
from batchlab.core.request import Request, Status
from batchlab.core.schedulers import all_policies, make_scheduler, policy_class
from batchlab.core.workload import Workload
from batchlab.sim import simulate
from tests.driver import drive
from tests.same_runs import COSTS, assert_same

POLICIES = sorted(all_policies())
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def shared_hashes(rng: np.random.Generator, i: int, prompt: int, hbs: int, docs: int = 3
                  ) -> tuple[int, ...]:
    """Hashes of a prompt that shares a random number of leading blocks with one of
    `docs` documents, then goes its own way (as a chat with a system prompt does)."""
    n = -(-prompt // hbs)
    shared = int(rng.integers(0, n + 1))
    d = int(rng.integers(docs))
    return tuple(d * 10_000 + j if j < shared else 10**6 + i * 1000 + j for j in range(n))


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 25))
    hbs = draw(st.sampled_from([1, 4, 16]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    reqs, t = [], 0.0
    for i in range(n):
        t += draw(st.sampled_from([0.0, 0.0, 0.5, 1.0, 3.0, 20.0]))
        p = draw(st.integers(1, 80))
        reqs.append(Request(id=i, arrival=t, prompt_len=p, output_len=draw(st.integers(1, 40)),
                            priority=draw(st.integers(0, 3)),
                            prefix_hashes=shared_hashes(rng, i, p, hbs), hash_block_size=hbs))
    return reqs


@st.composite
def configs(draw):
    hbs_divisible = draw(st.sampled_from([1, 4, 16]))  # block sizes that map onto 1/4/16
    kv_tokens = draw(st.integers(24, 400))
    cfg = SchedulerConfig(
        policy=draw(st.sampled_from(POLICIES)), prefix_caching=True,
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=draw(st.sampled_from([None, 16, 64, 200])),
        block_size=hbs_divisible, admission=draw(st.sampled_from(["fcfs", "priority"])),
        preemption=draw(st.sampled_from(["recent", "priority"])))
    return cfg, max(2, kv_tokens // hbs_divisible)


def check_blocks(sched, batch, _state) -> None:
    """Every block is exactly one of free, cached-and-free, in use; reference counts
    match the tables that hold a cached unit; a cached unit sits only where its key does."""
    kv, cache, u = sched.kv, sched.kv.cache, sched.kv.unit
    free = kv._free + list(range(kv._next, kv.num_blocks))
    assert len(free) == len(set(free)), "a block freed twice"
    evictable = [b for h in cache.evictable for b in cache.units[h][1]]
    holders = Counter(b for s in sched.running for b in s.block_table)
    in_use = set(holders)
    assert len(evictable) == len(set(evictable))
    assert not (set(free) & set(evictable)) and not (set(free) & in_use)
    assert not (set(evictable) & in_use)
    assert len(free) + len(evictable) + len(in_use) == kv.num_blocks, "blocks not conserved"
    assert kv.num_free == len(free) + len(evictable)
    assert all(r >= 1 for r in cache.refs.values()), "a reference count below 1 is kept"
    assert set(cache.refs) | set(cache.evictable) == set(cache.units)
    assert not set(cache.refs) & set(cache.evictable)
    assert {cache.head_of[k] for k, _ in cache.units.values()} == set(cache.units)
    uses = Counter()
    for s in sched.running:
        assert len(s.block_table) * kv.block_size >= s.num_computed
        t = s.block_table
        for i in range(0, len(t) - u + 1, u):
            if t[i] in cache.units:  # reused (or cached) only at an exact key match
                key, blocks = cache.units[t[i]]
                assert i // u < len(s.block_keys) and key == s.block_keys[i // u]
                assert tuple(t[i:i + u]) == blocks
                uses[t[i]] += 1
    assert dict(uses) == cache.refs, "a reference count differs from the tables using it"
    shared = {b for b, n in holders.items() if n > 1}
    assert all(any(b in cache.units[h][1] for h in cache.refs) for b in shared)
    for s in sched.waiting():
        assert s.block_table == [] and s.status is Status.WAITING
    for i, s in enumerate(batch.seqs):  # the last known token is always computed
        assert batch.starts[i] + batch.num_tokens[i] <= s.known


@SETTINGS
@given(workloads(), configs())
def test_block_states_hold_and_every_request_finishes_once(reqs, cfg_blocks):
    cfg, blocks = cfg_blocks
    sched = make_scheduler(cfg, blocks)
    finished, rejected, _ = drive(sched, reqs, check=check_blocks)
    assert Counter(s.id for s in finished + rejected) == Counter(r.id for r in reqs)
    for s in finished:
        assert s.num_generated == s.request.output_len and s.block_table == []
    assert sched.kv.num_free == blocks and not sched.kv.cache.refs
    assert 0 <= sched.prefix_hits <= sched.prefix_queries


def test_a_shared_prefix_is_computed_once_and_hits_are_counted_in_tokens():
    cfg = SchedulerConfig(policy="continuous", block_size=4, max_num_seqs=4)
    sched = make_scheduler(cfg, 64)
    h = (1, 2, 3)  # 12 tokens, 3 blocks
    a = Request(0, 0.0, 12, 2, prefix_hashes=h, hash_block_size=4)
    b = Request(1, 5.0, 12, 2, prefix_hashes=h, hash_block_size=4)
    c = Request(2, 5.0, 10, 2, prefix_hashes=(1, 2, 9), hash_block_size=4)
    finished, _, _ = drive(sched, [a, b, c], check=check_blocks)
    got = {s.id: s.cached_tokens for s in finished}
    # b: 2 blocks (the third holds its last prompt token, which is always computed);
    # c: its 2 full blocks that match (its third is partial and differs).
    assert got == {0: 0, 1: 8, 2: 8}
    assert (sched.prefix_queries, sched.prefix_hits) == (34, 16)


def test_freed_blocks_stay_cached_and_are_evicted_lru_only_when_needed():
    kv = BlockManager(4, 1)
    t1, t2 = [], []
    kv.grow(t1, 2)
    kv.register(t1, (11, 12), 0, 2)
    kv.grow(t2, 1)
    kv.register(t2, (21,), 0, 1)
    kv.free(t1)
    kv.free(t2)  # evictable, least recent first: 12, 11 (a table's tail goes first), 21
    assert kv.num_free == 4 and kv.num_cached == 3
    assert kv.take(1) == [3]  # the never-used block first: nothing evicted
    assert kv.num_cached == 3
    assert kv.take(2) == [1, 0]  # then LRU: 12's block, then 11's
    assert kv.cached_prefix((21,), 2) == [2] and kv.cached_prefix((11,), 2) == []


def test_a_recompute_after_preemption_hits_its_own_prompt():
    cfg = SchedulerConfig(policy="continuous", block_size=4, max_num_seqs=2,
                          preemption="recent")
    # Two 8-token prompts in 5 blocks: decoding outgrows the pool and the later one is
    # preempted; its prompt blocks stay cached and its recompute reuses what is left.
    reqs = [Request(i, 0.0, 8, 8, prefix_hashes=(10 * i + 1, 10 * i + 2), hash_block_size=4)
            for i in range(2)]
    hits_at_admission = []

    # A subclass, not a patched instance: a compiled scheduler's methods are read-only.
    class Spied(policy_class(cfg.policy)):
        def _admit_head(self, batch, now, n, fits=None):
            before = self.prefix_hits
            ok = super()._admit_head(batch, now, n, fits)
            if ok:
                hits_at_admission.append(self.prefix_hits - before)
            return ok
    sched = Spied(cfg, BlockManager(5, cfg.block_size))
    finished, _, _ = drive(sched, reqs, check=check_blocks)
    assert sum(s.preemptions for s in finished) >= 1
    # The readmission found its prompt's first block cached: the survivor's growth
    # evicted the second one (a freed table's tail is evicted first, as in vLLM).
    assert hits_at_admission[2:] == [4]


def test_caching_off_and_static_default_reuse_nothing():
    h = (5, 6)
    reqs = [Request(i, float(i * 10), 9, 2, prefix_hashes=h, hash_block_size=4) for i in range(3)]
    for cfg in (SchedulerConfig(policy="continuous", block_size=4, prefix_caching=False),
                SchedulerConfig(policy="static", block_size=4)):
        sched = make_scheduler(cfg, 32)
        drive(sched, reqs)
        assert sched.prefix_hits == 0 and sched.kv.num_cached == 0
    sched = make_scheduler(SchedulerConfig(policy="static", block_size=4, prefix_caching=True), 32)
    drive(sched, reqs)
    assert sched.prefix_hits == 16


def test_keys_are_chained_and_map_trace_blocks_onto_engine_blocks():
    r = Request(0, 0.0, 64, 1, prefix_hashes=(7, 8), hash_block_size=32)
    keys, unit = block_keys(r, 16)
    assert unit == 2 and len(keys) == 2 and len(set(keys)) == 2
    # Same hash at the same place after a different parent: a different key.
    other = Request(1, 0.0, 64, 1, prefix_hashes=(9, 8), hash_block_size=32)
    assert block_keys(other, 16)[0][1] != keys[1]
    # Engine blocks spanning two hash blocks; a prompt's partial block has no key.
    spans = block_keys(Request(2, 0.0, 70, 1, prefix_hashes=(1, 2, 3), hash_block_size=32), 64)
    assert len(spans[0]) == 1 and spans[1] == 1
    with pytest.raises(ValueError, match="neither divides"):
        block_keys(Request(3, 0.0, 64, 1, prefix_hashes=(1, 2), hash_block_size=24), 16)
    ids = tuple(range(32))
    assert block_keys(Request(4, 0.0, 32, 1, prompt_token_ids=ids), 16) == \
        block_keys(Request(5, 0.0, 32, 1, prompt_token_ids=ids), 16)


def test_a_unit_of_several_blocks_is_cached_and_evicted_whole():
    cfg = SchedulerConfig(policy="continuous", block_size=4, max_num_seqs=4)
    sched = make_scheduler(cfg, 12)
    # 16-token hash blocks: units of 4 KV blocks. The second request reuses one unit:
    # its second holds its last prompt token, so it computes it again (a duplicate, left
    # uncached), and its decode then evicts the first request's copy, the LRU unit.
    reqs = [Request(i, 10.0 * i, 32, 2, prefix_hashes=(1, 2), hash_block_size=16) for i in range(2)]
    finished, _, _ = drive(sched, reqs, check=check_blocks)
    assert [s.cached_tokens for s in finished] == [0, 16] and sched.kv.unit == 4
    assert sched.kv.num_cached == 4 and sched.kv.num_free == 12
    t = []
    sched.kv.grow(t, 9 * 4)  # 8 plain blocks, then the evicted unit's first block
    assert sched.kv.num_cached == 0 and sched.kv.num_free == 3 and len(set(t)) == 9


def test_bookkeeping_does_not_grow_with_the_pool():
    kv = BlockManager(10**12, 16)  # a pool far larger than memory, held in O(1)
    t = []
    kv.grow(t, 16 * 3)
    assert t == [0, 1, 2] and kv.num_free == 10**12 - 3
    kv.free(t)
    assert kv.num_free == 10**12 and len(kv._free) == 3


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    rate = draw(st.sampled_from([2.0, 20.0, 200.0, float("inf")]))
    arrivals = (np.zeros(n) if np.isinf(rate)
                else np.concatenate(([0.0], np.cumsum(rng.exponential(1 / rate, n - 1)))))
    prompt = rng.integers(1, draw(st.sampled_from([20, 300])), n)
    hbs = draw(st.sampled_from([4, 16]))
    work = Workload(arrivals, prompt, rng.integers(1, draw(st.sampled_from([10, 120])), n),
                    prefix_hashes=[shared_hashes(rng, i, int(p), hbs) for i, p in enumerate(prompt)],
                    hash_block_size=hbs, max_concurrency=draw(st.sampled_from([None, None, 3])))
    cfg = SchedulerConfig(
        policy=draw(st.sampled_from(POLICIES)), prefix_caching=True,
        max_num_seqs=draw(st.integers(1, 12)),
        max_num_batched_tokens=draw(st.sampled_from([None, 8, 64, 512])),
        block_size=draw(st.sampled_from([1, 4])),
        preemption=draw(st.sampled_from(["recent", "priority"])))
    blocks = max(2, draw(st.integers(40, 3000)) // cfg.block_size)
    return (work, cfg, blocks, draw(st.sampled_from(sorted(COSTS))), draw(st.sampled_from([1, 1, 2])),
            draw(st.sampled_from(["least_loaded", "prefix_aware"])))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_fast_forward_equals_step_by_step_with_caching(scenario):
    work, cfg, blocks, cost, replicas, router = scenario
    kw = dict(replicas=replicas, router=router)
    stepped = simulate(work, cfg, COSTS[cost], blocks, fast_forward=False, **kw)
    fast = simulate(work, cfg, COSTS[cost], blocks, fast_forward=True, **kw)
    assert_same(stepped, fast)


def test_a_block_size_that_does_not_divide_the_hash_blocks_is_one_line_naming_the_row():
    w = Workload([0.0, 1.0], [40, 600], [2, 2], prefix_hashes=[(), (1, 2)], hash_block_size=512)
    with pytest.raises(ValueError) as info:
        simulate(w, SchedulerConfig(block_size=24), COSTS["linear"], 100)
    msg = str(info.value)
    assert "\n" not in msg and "request 1 (the first with prefix hashes)" in msg
    assert "KV block size 24 does not divide the workload's 512-token hash blocks" in msg
    # Without caching the hashes are not used: nothing to map.
    simulate(w, SchedulerConfig(block_size=24, prefix_caching=False), COSTS["linear"], 100)


def test_prefix_aware_routing_follows_the_cache_until_the_load_is_too_uneven():
    # A long shared prefix cached on replica 0: later requests with it go there, where
    # round robin alternates and computes it once more on replica 1.
    n = 12
    hashes = [tuple(range(8)) + (100 + i,) for i in range(n)]
    w = Workload(np.arange(n) * 2.0, [140] * n, [4] * n, prefix_hashes=hashes, hash_block_size=16)
    cfg = SchedulerConfig(policy="chunked")
    aware = simulate(w, cfg, COSTS["linear"], 1000, replicas=2, router="prefix_aware")
    assert (aware.requests["replica"] == 0).all()
    assert (aware.requests["cached_tokens"][1:] == 128).all()
    spread = simulate(w, cfg, COSTS["linear"], 1000, replicas=2, router="round_robin")
    assert spread.summary()["prefix_cache_hits"] == aware.summary()["prefix_cache_hits"] - 128
    # All at once: replica 0 piles up, and past the balance threshold requests go to 1.
    burst = simulate(w.replace(arrival=np.zeros(n)), cfg, COSTS["linear"], 1000, replicas=2,
                     router="prefix_aware")
    assert set(burst.requests["replica"].tolist()) == {0, 1}
