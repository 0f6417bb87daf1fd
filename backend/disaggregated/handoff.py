"""The KV of a prompt moved between two engines' pools: staged off the prefill pool as its
prefill ends (before its scheduler frees the blocks), landed in the blocks the decode
scheduler gives it on admission. The staged tensor is what a link would carry: every
layer's K and V of the prompt's blocks (the last one padded), its bytes counted; and what
one staging costs beyond its bytes (validate's price of a hand-off's fixed part)."""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from batchlab.backend.device import synchronize
from batchlab.backend.kv_cache import PagedKVCache
from batchlab.core.kv import blocks_for


@dataclass
class StagedKV:
    blocks: torch.Tensor  # [layers, 2, kv_heads, n_blocks, block_size, head_dim]
    tokens: int

    @property
    def nbytes(self) -> int:
        return self.blocks.numel() * self.blocks.element_size()


def stage(cache: PagedKVCache, block_table: list[int], tokens: int) -> StagedKV:
    """A copy of the first `tokens` tokens' KV of a sequence whose blocks are block_table."""
    n = blocks_for(tokens, cache.block_size)
    if len(block_table) < n:
        raise RuntimeError(f"block table of {len(block_table)} blocks holds no {tokens} tokens")
    ids = torch.tensor(block_table[:n], dtype=torch.int64, device=cache.device)
    return StagedKV(cache.pool.index_select(3, ids), tokens)  # index_select copies


def land(cache: PagedKVCache, staged: StagedKV, block_table: list[int], first_block: int = 0) -> None:
    """Write the staged KV into block_table's blocks from first_block on (the ones before
    hold a prefix the decode pool had cached: the same tokens, left as they are)."""
    n = staged.blocks.shape[3]
    if len(block_table) < n:
        raise RuntimeError(f"block table of {len(block_table)} blocks cannot take {n} staged blocks")
    if staged.blocks.shape[:3] != cache.pool.shape[:3] or staged.blocks.shape[4:] != cache.pool.shape[4:]:
        raise RuntimeError("staged KV and the decode pool differ in layers, heads or block size")
    if first_block < n:
        ids = torch.tensor(block_table[first_block:n], dtype=torch.int64, device=cache.device)
        cache.pool.index_copy_(3, ids, staged.blocks[:, :, :, first_block:n].to(cache.pool.device))


def staging_seconds(spec, dtype: torch.dtype, device: torch.device, block_size: int, reps: int = 21,
                    evict_mib: int = 64) -> float:
    """What one hand-off costs beyond its bytes, measured as pools.py times a staging (the
    call, then the device's sync): the median of `reps` stagings of one block, after one
    untimed. Each follows a copy of evict_mib MiB (the size validate's copy bandwidth is
    measured at), as a real one follows a forward pass: its pool and allocator cold; each
    staged copy is kept, as a real one is until it lands. Warm, it measured a fifth of it."""
    cache = PagedKVCache(spec, 2, block_size, dtype, device)
    src = torch.ones(evict_mib * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    kept, ts = [], []
    for i in range(reps + 1):
        dst.copy_(src)
        synchronize(device)
        t0 = time.perf_counter()
        kept.append(stage(cache, [i % 2], block_size))
        synchronize(device)
        ts.append(time.perf_counter() - t0)
    return float(sorted(ts[1:])[reps // 2])
