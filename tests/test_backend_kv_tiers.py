"""Swap preemption on the real backend (backend/kv_tiers/): a preempted sequence's KV
blocks are really copied to host memory and back, and greedy outputs equal the
recompute run's and transformers' own, token for token."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the backend extra; without it the module skips

from batchlab.backend.driver import run_workload
from batchlab.backend.kv_cache import PagedKVCache
from batchlab.backend.kv_tiers import HostSwap
from batchlab.core.config import SchedulerConfig
from batchlab.core.kv_tiers import TierConfig
from batchlab.core.request import Request
from batchlab.core.schedulers import make_scheduler
from batchlab.core.workload import Workload
from tests.test_backend_oracle import W_MIXED, _reference

SWAP = TierConfig(capacity_gib=0.25, preemption="swap", prefix=False)


def _serve(runtime, w, tier, **sched):
    outputs: dict[int, list[int]] = {}
    res = run_workload(runtime, w, SchedulerConfig(**sched), time_scale=0.0, progress=False,
                       outputs=outputs, kv_tier=tier)
    assert (res.requests["status"] == "finished").all()
    return outputs, res


@pytest.fixture(scope="module")
def reference(tiny):
    return _reference(tiny.hf, tiny.spec.vocab_size, W_MIXED)


@pytest.mark.parametrize("sched", [
    dict(policy="chunked", block_size=4, num_kv_blocks=22, max_num_batched_tokens=32),
    dict(policy="continuous", block_size=4, num_kv_blocks=24)])
def test_swapped_outputs_equal_recompute_and_the_reference(hf_runtime, reference, sched):
    swapped, res = _serve(hf_runtime, W_MIXED, SWAP, **sched)
    recomputed, plain = _serve(hf_runtime, W_MIXED, None, **sched)
    assert res.steps["tier_swaps"].sum() > 0 and res.meta.kv_tier_bytes_copied > 0
    assert res.steps["tier_recomputes"].sum() == 0
    assert swapped == recomputed == reference
    assert "tier_swaps" not in plain.steps


def test_a_swap_copies_the_blocks_back_into_new_ones():
    """The victim's blocks hold known values; it comes back in other blocks holding
    exactly them, and its old blocks, handed to someone else, were free to change."""
    from batchlab.core.model.presets import lookup_model
    spec = lookup_model("batchlab-tiny")
    cache = PagedKVCache(spec, 12, 4)
    sched = make_scheduler(SchedulerConfig(policy="continuous", max_num_seqs=4, block_size=4), 12)
    home = HostSwap(SWAP, cache)
    sched.use_kv_home(home)
    a = sched.add(Request(0, 0.0, 10, 30), 0.0)
    b = sched.add(Request(1, 0.0, 10, 30), 0.0)
    cache.pool.copy_(torch.randn_like(cache.pool))
    batch = sched.schedule(0.0)
    home.apply()
    sched.complete(batch, 0.0)
    for _ in range(40):  # decode until the pool runs out and someone is swapped
        before = {s: cache.pool[:, :, :, s.block_table].clone() for s in (a, b) if s.block_table}
        batch = sched.schedule(0.0)
        home.apply()
        if batch.preempted:
            break
        sched.complete(batch, 0.0)
    victim = batch.preempted[0]
    kept = victim.kv_elsewhere
    assert kept > 0 and victim in home.host
    saved = before[victim][:, :, :, :-(-kept // 4)]
    assert torch.equal(home.host[victim], saved)
    cache.pool.zero_()  # what the victim left behind is gone
    sched.complete(batch, 0.0)
    while victim.kv_elsewhere:  # the other one finishes; the victim is admitted again
        batch = sched.schedule(0.0)
        home.apply()
        sched.complete(batch, 0.0)
    back = cache.pool[:, :, :, victim.block_table[:saved.shape[3]]]
    assert torch.equal(back, saved) and victim not in home.host


def test_the_backend_tier_refuses_prefix_units():
    from batchlab.core.model.presets import lookup_model
    cache = PagedKVCache(lookup_model("batchlab-tiny"), 4, 4)
    with pytest.raises(ValueError, match=r"^kv_tier.prefix: the backend's tier swaps"):
        HostSwap(TierConfig(capacity_gib=1), cache)


def test_a_tier_on_a_plain_workload_keeps_the_run_whole(runtime):
    w = Workload(np.zeros(6), [30, 12, 40, 8, 25, 16], [20, 30, 10, 25, 15, 20])
    out, res = _serve(runtime, w, SWAP, policy="chunked", block_size=4, num_kv_blocks=20,
                      max_num_batched_tokens=32)
    s = res.summary()
    assert s["kv_tier_swaps"] == res.steps["tier_swaps"].sum() > 0
    assert s["kv_tier_bytes_in"] <= s["kv_tier_bytes_out"]
    assert all(len(out[i]) == w.output_len[i] for i in range(len(w)))


def test_swaps_under_speculation_keep_the_targets_output(hf_runtime, reference):
    """The draft shares the target's cache (backend/speculative/draft.py): the one pool
    swapped out and back, verification still keeps the target's greedy tokens."""
    from batchlab.core.speculative.config import SpeculativeConfig
    outputs: dict[int, list[int]] = {}
    res = run_workload(hf_runtime, W_MIXED, SchedulerConfig(policy="chunked", block_size=4, num_kv_blocks=22,
                                                            max_num_batched_tokens=32),
                       time_scale=0.0, progress=False, outputs=outputs, kv_tier=SWAP,
                       speculative=SpeculativeConfig(method="draft_model", draft_layers=1, num_speculative_tokens=3))
    assert (res.requests["status"] == "finished").all()
    assert res.steps["tier_swaps"].sum() > 0 and res.meta.speculative.verifications > 0
    assert outputs == reference
