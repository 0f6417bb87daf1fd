"""KV tiers (core/kv_tiers/): swapping and recompute beside each other, prefix units kept
below the GPU. Invariants by hypothesis: blocks conserved across the GPU pool and the
tier, no sequence lost, determinism, the same tokens per request either way, Little's
law from the scheduler's own counts, fast-forward exactly equal to stepping."""
from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.kv import blocks_for
from batchlab.core.kv_tiers import TierConfig, TieredHome, lone_prefill_seconds
from batchlab.core.kv_tiers.columns import COLUMNS
from batchlab.core.kv_tiers.home import HIT, IN, OUT, RECOMPUTES, SWAPS
from batchlab.core.request import Request, Status
from batchlab.core.schedulers import make_scheduler
from batchlab.core.workload import Workload
from batchlab.sim.simulate import simulate
from batchlab.core.batch import step_features
from tests.same_runs import assert_same

PRICE = LinearCostModel(intercept=0.001, coef={"prefill_tokens": 0.0001, "decode_tokens": 0.001})
BPT = 2**20  # KV bytes a token: 16 MiB a 16-token block, so GiB figures stay small
BS = 4


def _tier(preemption: str = "swap", gib: float = 1.0, gbs: float = 25.0, prefix: bool = True) -> TierConfig:
    return TierConfig(capacity_gib=gib, bandwidth_gbs=gbs, latency_us=10.0, preemption=preemption, prefix=prefix)


def _home(tier: TierConfig) -> TieredHome:
    return TieredHome(tier, BPT, BS, lone_prefill_seconds(PRICE))


def _requests(spec: list[tuple[int, int, int]]) -> list[Request]:
    """(prompt, output, family): prompts of one family share their leading tokens."""
    return [Request(i, 0.0, p, o, prompt_token_ids=tuple(f * 1000 + j for j in range(p)))
            for i, (p, o, f) in enumerate(spec)]


def step_through(sched, price, after=None, limit: int = 5000):
    """As tests/stepping.py, checking the pool by distinct blocks: running sequences
    share cached prefix blocks here. Steps: (batch, features, seconds, items)."""
    steps, now = [], 0.0
    for _ in range(limit):
        if not sched.has_work():
            break
        batch = sched.schedule(now)
        assert not batch.is_empty
        f = step_features(batch)
        dt = price(batch, f)
        items = [(s, start, n, s.num_generated) for s, start, n in zip(batch.seqs, batch.starts, batch.num_tokens)]
        sched.complete(batch, now + dt)
        if after is not None:
            after()
        steps.append((batch, f, dt, items))
        now += dt
        assert sched.kv.num_used == len({b for s in sched.running for b in s.block_table})
    assert not sched.has_work() and sched.kv.num_used == 0
    return steps


def _check_tier(sched, home: TieredHome) -> None:
    """The tier holds exactly the blocks of the waiting sequences that swapped, and the
    prefix units it lists, within its capacity."""
    waiting = {s: blocks_for(s.kv_elsewhere, BS) for s in sched.waiting() if s.kv_elsewhere}
    assert home.swapped == waiting
    assert home.swap_blocks == sum(waiting.values())
    assert home.prefix_blocks == sum(home.prefix.values())
    assert 0 <= home.blocks_used <= home.capacity


def _serve(spec, blocks: int, tier: TierConfig | None, policy: str = "chunked", caching: bool = True):
    cfg = SchedulerConfig(policy=policy, max_num_seqs=4, block_size=BS, max_num_batched_tokens=64,
                          prefix_caching=caching)
    sched = make_scheduler(cfg, blocks)
    home = _home(tier) if tier else None
    if home:
        sched.use_kv_home(home)
    seqs = [sched.add(r, 0.0) for r in _requests(spec)]

    def price(batch, f):
        dt = PRICE.step_time(f)
        if home:
            home.note(0.0)  # the step's figures into the totals, as the simulator does
            dt += home.load_seconds(batch.kv_loaded) if batch.kv_loaded else 0.0
            dt += home.save_seconds(batch.kv_saved) if batch.kv_saved else 0.0
        return dt

    steps = step_through(sched, price, after=(lambda: _check_tier(sched, home)) if home else None)
    if home:
        assert not home.swapped and home.swap_blocks == 0  # everyone came back
    return steps, seqs, home


SPECS = st.lists(st.tuples(st.integers(1, 40), st.integers(1, 30), st.integers(0, 2)), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(spec=SPECS, blocks=st.integers(12, 40), gib=st.sampled_from([0.02, 0.1, 1.0]),
       preemption=st.sampled_from(["swap", "recompute", "cheapest"]),
       policy=st.sampled_from(["continuous", "chunked"]))
def test_blocks_are_conserved_and_no_sequence_is_lost(spec, blocks, gib, preemption, policy):
    steps, seqs, home = _serve(spec, blocks, _tier(preemption, gib), policy)
    for s in seqs:
        if s.status is not Status.REJECTED:
            assert s.status is Status.FINISHED and s.num_generated == s.request.output_len
    swaps = sum(1 for b, _, _, _ in steps for _ in b.preempted if b.kv_saved)
    assert (home.totals[SWAPS] > 0) == bool(swaps)
    assert home.totals[SWAPS] + home.totals[RECOMPUTES] == sum(len(b.preempted) for b, _, _, _ in steps)


@settings(max_examples=40, deadline=None)
@given(spec=SPECS, blocks=st.integers(12, 40))
def test_swap_and_recompute_serve_the_same_tokens_per_request(spec, blocks):
    runs = {}
    for mode in ("swap", "recompute"):
        steps, seqs, _ = _serve(spec, blocks, _tier(mode, prefix=False))
        emitted: dict[int, int] = {}
        for b, _, _, items in steps:
            for (s, _, _, _), kept in zip(items, b.sampled):
                emitted[s.id] = emitted.get(s.id, 0) + kept
        runs[mode] = (emitted, [s.status for s in seqs])
    # (Not fewer prefill tokens in all: the two schedules part after the first preemption,
    # and a sequence swapped back whole can cause more preemptions than it saves.)
    assert runs["swap"] == runs["recompute"]


def test_a_swap_is_priced_by_its_bytes_both_ways():
    """Three long replies on a pool that holds two: the swap-out's step and the swap-in's
    step each pay latency + bytes / bandwidth on top of the cost model. (No prefix
    caching: with it, what the GPU still caches of a swapped sequence is not loaded.)"""
    steps, _, home = _serve([(30, 40, 0), (30, 40, 1), (30, 40, 2)], 40, _tier("swap"), caching=False)
    out = [(b, f, dt) for b, f, dt, _ in steps if b.kv_saved]
    back = [(b, f, dt) for b, f, dt, _ in steps if b.kv_loaded]
    assert out and back
    one = lambda n: 10e-6 + n * BPT / 25e9  # noqa: E731
    for b, f, dt in out:
        assert dt == pytest.approx(PRICE.step_time(f) + one(b.kv_saved) + (one(b.kv_loaded) if b.kv_loaded else 0))
    assert sum(b.kv_saved for b, _, _ in out) == sum(b.kv_loaded for b, _, _ in back) == home.totals[OUT]


def test_cheapest_swaps_only_where_the_link_beats_the_prefill():
    fast, slow = _home(_tier("cheapest", gbs=1000.0)), _home(_tier("cheapest", gbs=0.001))
    fast_steps, _, _ = _serve([(30, 40, 0), (30, 40, 1), (30, 40, 2)], 40, _tier("cheapest", gbs=1000.0))
    slow_steps, _, _ = _serve([(30, 40, 0), (30, 40, 1), (30, 40, 2)], 40, _tier("cheapest", gbs=0.001))
    assert any(b.kv_saved for b, _, _, _ in fast_steps)
    assert not any(b.kv_saved for b, _, _, _ in slow_steps)
    n = 60
    assert 2 * fast.transfer_seconds(n) < lone_prefill_seconds(PRICE)(n) < 2 * slow.transfer_seconds(n)


def test_a_full_tier_falls_back_to_recompute():
    """A tier of one block (4 tokens of 1 MiB) holds no preempted sequence of 30+ tokens."""
    steps, _, home = _serve([(30, 40, 0), (30, 40, 1), (30, 40, 2)], 40, _tier("swap", gib=0.004))
    assert home.capacity == 1
    assert home.totals[RECOMPUTES] > 0 and home.totals[SWAPS] == 0  # 30+ tokens need 8 blocks: none fit


def test_evicted_prefix_units_come_back_from_the_tier_at_their_transfer_cost():
    """A prompt served, its cached blocks evicted by others, then served again: its prefix
    is found in the tier and loaded, not computed."""
    spec = [(32, 1, 7)] + [(32, 1, f) for f in range(3)] + [(32, 1, 7)]
    cfg = SchedulerConfig(policy="continuous", max_num_seqs=1, block_size=BS)
    runs = {}
    for tier in (None, _tier("swap")):
        sched = make_scheduler(cfg, 10)
        home = _home(tier) if tier else None
        if home:
            sched.use_kv_home(home)
        reqs = _requests(spec)
        for r in reqs:
            sched.add(r, 0.0)
        noted = home.note if home else (lambda start: None)
        runs[tier is None] = (step_through(sched, lambda b, f: (noted(0.0), PRICE.step_time(f))[1]), home)
    (plain, _), (tiered, home) = runs[True], runs[False]
    last = lambda steps: [it for _, _, _, items in steps for it in items if it[0].id == 4][0]  # noqa: E731
    assert last(plain)[1] == 0  # without a tier, evicted: computed from its start
    s, start, n, _ = last(tiered)
    assert start == 28 and n == 4  # 7 of its 8 blocks found below (never its last token's)
    loads = [b.kv_loaded for b, _, _, items in tiered if any(it[0].id == 4 for it in items)]
    assert loads[0] == 28
    assert home.totals[HIT] == 28 and home.totals[IN] == 28  # a first-admission hit, loaded


def _workload(n: int, seed: int, prefixed: bool) -> Workload:
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.uniform(0, 3, n))
    prompt, output = rng.integers(8, 120, n), rng.integers(4, 80, n)
    if not prefixed:
        return Workload(arrival, prompt, output)
    hashes = [tuple(int(h) for h in rng.integers(0, 3, p // 16)) for p in prompt]
    return Workload(arrival, prompt, output, prefix_hashes=hashes, hash_block_size=16)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), blocks=st.integers(30, 120), prefixed=st.booleans(),
       preemption=st.sampled_from(["swap", "recompute", "cheapest"]),
       policy=st.sampled_from(["continuous", "chunked"]))
def test_fast_forward_is_exact_and_runs_are_deterministic_with_a_tier(seed, blocks, prefixed, preemption, policy):
    w = _workload(40, seed, prefixed)
    cfg = SchedulerConfig(policy=policy, max_num_seqs=8, block_size=BS)
    tier = _tier(preemption, gib=0.05)
    fast, stepped, again = [simulate(w, cfg, PRICE, blocks, fast_forward=ff, kv_tier=tier, kv_bytes_per_token=BPT)
                            for ff in (True, False, True)]
    assert_same(stepped, fast)  # integers exactly, times to the rounding of their sums
    for table in ("requests", "steps"):  # the same run twice: every value exactly
        a, b = getattr(fast, table), getattr(again, table)
        assert list(a) == list(b)
        for c in a:
            assert np.array_equal(a[c], b[c], equal_nan=a[c].dtype.kind == "f"), (table, c)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), blocks=st.integers(50, 80),
       preemption=st.sampled_from(["swap", "recompute", "cheapest"]))
def test_littles_law_holds_from_the_schedulers_own_counts(seed, blocks, preemption):
    """The time-average number of requests in the system, integrated from the
    scheduler's own queues at each step's end (and the arrivals between), equals the
    arrival rate times the mean time in the system from the request table (L = lambda W)."""
    w = _workload(50, seed, True)
    cfg = SchedulerConfig(policy="chunked", max_num_seqs=8, block_size=BS)
    ends: list[tuple[float, int]] = []
    holder = {}

    def observe(replica, start, took, batch):
        sched = holder["sched"]
        ends.append((start + took, len(sched.running) + sched.num_waiting))

    simulation = sys.modules["batchlab.sim.simulate"]  # the module (batchlab.sim re-exports the function)
    make = simulation.make_scheduler

    def keep(*a, **k):  # the replica's scheduler, for its counts
        holder["sched"] = make(*a, **k)
        return holder["sched"]
    simulation.make_scheduler = keep
    try:
        res = simulate(w, cfg, PRICE, blocks, observer=observe, kv_tier=_tier(preemption, gib=0.05),
                       kv_bytes_per_token=BPT)
    finally:
        simulation.make_scheduler = make
    req = res.requests
    done = req["status"] == "finished"  # the others were rejected on arrival, never queued
    assert (done | (req["status"] == "rejected")).all()
    req = {c: v[done] for c, v in req.items()}
    arrivals = np.sort(req["arrival_s"])
    area, t, n = 0.0, 0.0, 0
    for end, count in ends:  # between samples: the last count plus the arrivals since
        new = arrivals[(arrivals > t) & (arrivals <= end)]
        area += n * (end - t) + float((end - new).sum())
        t, n = end, count
    assert n == 0
    horizon = float(req["finish_s"].max())
    lam, mean_w = len(arrivals) / horizon, float((req["finish_s"] - req["arrival_s"]).mean())
    assert area / horizon == pytest.approx(lam * mean_w, rel=1e-9)


def test_runs_without_a_tier_have_no_tier_columns_or_figures():
    w = _workload(40, 1, True)
    cfg = SchedulerConfig(policy="chunked", max_num_seqs=8, block_size=BS)
    plain = simulate(w, cfg, PRICE, 40)
    tiered = simulate(w, cfg, PRICE, 40, kv_tier=_tier(), kv_bytes_per_token=BPT)
    assert not set(COLUMNS) & set(plain.steps) and set(COLUMNS) <= set(tiered.steps)
    assert not any(k.startswith("kv_tier") for k in plain.summary())
    s = tiered.summary()
    assert s["kv_tier_bytes_out"] == int(tiered.steps["tier_out_bytes"].sum()) > 0
    no_table = simulate(w, cfg, PRICE, 40, kv_tier=_tier(), kv_bytes_per_token=BPT, record_steps=False)
    t = no_table.summary()
    for k in ("kv_tier_swaps", "kv_tier_recomputes", "kv_tier_bytes_out", "kv_tier_bytes_in", "kv_tier_prefix_hits"):
        assert t[k] == s[k], k


@pytest.mark.parametrize("fields, problem", [
    ({"capacity_gib": 0}, "kv_tier.capacity_gib"), ({"capacity_gib": -2}, "kv_tier.capacity_gib"),
    ({"capacity_gib": 1, "bandwidth_gbs": 0}, "kv_tier.bandwidth_gbs"),
    ({"capacity_gib": 1, "bandwidth_gbs": -5}, "kv_tier.bandwidth_gbs"),
    ({"capacity_gib": 1, "latency_us": -1}, "kv_tier.latency_us"),
    ({"capacity_gib": 1, "preemption": "sometimes"}, "kv_tier.preemption"),
    ({}, "kv_tier.capacity_gib")])
def test_bad_tier_settings_are_one_line_errors_naming_the_field(fields, problem):
    from batchlab.experiments.config import build_config
    from batchlab.experiments.errors import UserError
    with pytest.raises(UserError) as e:
        build_config({"kv_tier": fields})
    assert str(e.value).startswith(problem) and "\n" not in str(e.value)


def test_a_tier_smaller_than_one_block_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"^kv_tier.capacity_gib = 1e-05 holds no KV block"):
        TieredHome(TierConfig(capacity_gib=1e-5, preemption="swap"), BPT, 16)
