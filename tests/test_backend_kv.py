"""The paged KV pool: sized from a budget, addressed by core's block tables."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the backend extra; without it the module skips

from batchlab.backend.attention import _split, build_metadata
from batchlab.backend.kv_cache import PagedKVCache, blocks_in_budget, bytes_per_block
from batchlab.core.kv import BlockManager
from batchlab.core.model.presets import MODELS

SPEC = MODELS["batchlab-tiny"]


def test_budget_gives_blocks():
    per = bytes_per_block(SPEC, 16, torch.float32)
    assert per == 16 * SPEC.kv_bytes_per_token  # fp32 preset: dtype_bytes = 4
    assert blocks_in_budget(SPEC, 16, torch.float32, 10 * per + per // 2) == 10
    cache = PagedKVCache(SPEC, 10, 16)
    assert cache.nbytes == 10 * per


def test_block_table_is_the_layout():
    """K/V written for a sequence's positions come back, in position order, when its
    block table is gathered, and land in the blocks the BlockManager handed out."""
    bs, kvh, d = 4, SPEC.num_kv_heads, SPEC.head_dim
    cache = PagedKVCache(SPEC, 12, bs)
    mgr = BlockManager(12, bs)
    a, b = [], []
    mgr.grow(a, 3)
    mgr.grow(b, 6)  # interleaved allocation: a's and b's blocks alternate
    mgr.grow(a, 10)
    meta = build_metadata([], [(0, 10, a), (0, 6, b)], cache)
    k = torch.randn(16, kvh, d)
    v = torch.randn(16, kvh, d)
    cache.write(2, meta.slots, k, v)
    K, V = cache.gather(2, torch.tensor(a), 1)  # [kvh, 1, 3 blocks * 4, d]
    assert torch.equal(K[:, 0, :10], k[:10].transpose(0, 1))
    assert torch.equal(V[:, 0, :10], v[:10].transpose(0, 1))
    # the slot of position 5 of `a` is in a[1], offset 1, in layer 2's pool only
    assert torch.equal(cache.pool[2, 0, :, a[1], 1], k[5])
    assert cache.pool[1].abs().sum() == 0
    Kb, _ = cache.gather(2, torch.tensor(b), 1)
    assert torch.equal(Kb[:, 0, :6], k[10:].transpose(0, 1))


def test_decode_groups_bound_padding():
    # one short-context crowd and a few long ones: worth two groups, not one
    nblocks = np.array([1] * 60 + [128] * 4)
    cuts = _split(nblocks, row_bytes=8192)
    assert len(cuts) > 2
    assert _split(np.array([5, 5, 5]), row_bytes=8192) == [0, 3]  # uniform: one group
