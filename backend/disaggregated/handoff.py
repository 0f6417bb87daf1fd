"""The KV of a prompt moved between two engines' pools: staged off the prefill pool as its
prefill ends (before its scheduler frees the blocks), landed in the blocks the decode
scheduler gives it on admission. The staged tensor is what a link would carry: every
layer's K and V of the prompt's blocks (the last one padded), its bytes counted."""
from __future__ import annotations

from dataclasses import dataclass

import torch

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
