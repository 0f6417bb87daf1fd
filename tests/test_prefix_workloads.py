"""Workloads that share prefixes: multi-turn chat, a shared system prompt, the
reusable-prefix fraction, and Mooncake hashes driving the cache."""
from __future__ import annotations

import numpy as np
import pytest

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.workload import Workload, WorkloadConfig, WorkloadError, build_workload
from batchlab.core.workload.conversations import HASH_BLOCK, prompt_hashes
from batchlab.core.workload.stats import reusable_prefix_fraction
from batchlab.sim import simulate


def test_each_turn_extends_its_conversation_and_all_share_the_system_prompt():
    w = build_workload(WorkloadConfig(source="multiturn", num_requests=200, seed=3))
    assert w.hash_block_size == HASH_BLOCK and np.all(np.diff(w.arrival) >= 0)
    sys_blocks = 512 // HASH_BLOCK
    assert all(h[:sys_blocks] == tuple(range(sys_blocks)) for h in w.prefix_hashes)
    by_conv: dict[int, list[int]] = {}
    for i, h in enumerate(w.prefix_hashes):
        by_conv.setdefault(h[sys_blocks] >> 40, []).append(i)
    multi = [ix for ix in by_conv.values() if len(ix) > 1]
    assert multi, "some conversation has several turns"
    for ix in multi:
        for a, b in zip(ix, ix[1:]):  # the next turn: the whole earlier prompt, and more
            pa, pb = int(w.prompt_len[a]), int(w.prompt_len[b])
            assert pb > pa + w.output_len[a]
            full = pa // HASH_BLOCK
            assert w.prefix_hashes[b][:full] == w.prefix_hashes[a][:full]
    again = build_workload(WorkloadConfig(source="multiturn", num_requests=200, seed=3))
    assert again.prefix_hashes == w.prefix_hashes  # deterministic


def test_a_shared_system_prompt_on_a_preset_is_hit_by_every_later_request():
    w = build_workload(WorkloadConfig(source="uniform", num_requests=20, system_prompt_len=64,
                                      rate=0.5))
    assert (w.prompt_len == 512 + 64).all()
    res = simulate(w, SchedulerConfig(policy="chunked"), LinearCostModel(0.01), 10_000)
    assert res.requests["cached_tokens"].tolist() == [0] + [64] * 19
    assert res.summary()["prefix_cache_hit_rate"] == pytest.approx(19 * 64 / (20 * 576))


def test_reusable_prefix_fraction_counts_what_an_unbounded_cache_serves():
    w = Workload([0, 1, 2], [32, 40, 32], [1, 1, 1],
                 prefix_hashes=[(1, 2), (1, 2, 3), (1, 9)], hash_block_size=16)
    # second: both blocks of the first (32); third: one block (16); never a last token.
    assert reusable_prefix_fraction(w) == pytest.approx((32 + 16) / 104)
    assert np.isnan(reusable_prefix_fraction(Workload([0], [5], [1])))


def test_prompt_hashes_mark_a_partial_last_block_as_its_own():
    a, b = prompt_hashes(40, 16, 0, 0), prompt_hashes(48, 16, 0, 1)
    assert a[:2] == b[:2] and a[2] != b[2]


def test_turns_on_a_trace_is_an_error(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_len,output_len\n0,10,2\n")
    with pytest.raises(WorkloadError, match="turns applies to synthetic presets"):
        build_workload(WorkloadConfig(source=str(path), turns=3))


def test_mooncake_hashes_drive_the_cache():
    from pathlib import Path
    w = build_workload(WorkloadConfig(source=str(Path(__file__).parent / "data" / "mooncake_100.jsonl")))
    on = simulate(w, SchedulerConfig(policy="chunked"), LinearCostModel(0.01), 200_000).summary()
    off = simulate(w, SchedulerConfig(policy="chunked", prefix_caching=False),
                   LinearCostModel(0.01), 200_000).summary()
    assert off["prefix_cache_hits"] == 0 < on["prefix_cache_hits"]
    # An unbounded pool serves whole 512-token blocks: at most the reusable fraction.
    assert on["prefix_cache_hit_rate"] <= reusable_prefix_fraction(w) + 1e-12
