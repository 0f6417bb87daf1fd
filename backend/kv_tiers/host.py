"""HostSwap: the simulator's TieredHome (core/kv_tiers/home.py), deciding the same way,
whose swaps really move the KV: a victim's blocks are copied out of the paged pool into
host memory, and into its new blocks when it is admitted again.

The scheduler decides while it forms a step, and only the forward pass writes the pool,
so the copies wait for the start of the step (apply(), before the forward, inside the
step's time, as vLLM v0's worker issues swap_out/swap_in before the model runs): first
every copy out (a victim's blocks may be handed to another sequence in the same step),
then every copy in. Prefix units are not kept on the backend (kv_tier.prefix = false):
that half of the tier is the simulator's."""
from __future__ import annotations

from typing import Callable

import torch

from batchlab.backend.kv_cache import PagedKVCache
from batchlab.core.kv import blocks_for
from batchlab.core.kv_tiers import TierConfig, TieredHome
from batchlab.core.request import Sequence


class HostSwap(TieredHome):
    def __init__(self, tier: TierConfig, cache: PagedKVCache,
                 recompute_seconds: Callable[[int], float] | None = None) -> None:
        if tier.prefix:
            raise ValueError("kv_tier.prefix: the backend's tier swaps preempted sequences only; "
                             "set prefix = false (--no-kv-tier-prefix)")
        per_token = cache.nbytes / (cache.num_blocks * cache.block_size)
        super().__init__(tier, per_token, cache.block_size, recompute_seconds)
        self.cache = cache
        self.host: dict[Sequence, torch.Tensor] = {}  # a swapped sequence's blocks, on the CPU
        self._outs: list[tuple[Sequence, list[int]]] = []  # decided this step, copied in apply()
        self._ins: list[tuple[Sequence, int]] = []
        self.bytes_copied = 0

    def evicted(self, seq: Sequence) -> int:
        table = list(seq.block_table)  # the scheduler frees it right after
        kept = super().evicted(seq)
        if kept:
            self._outs.append((seq, table[:blocks_for(kept, self.block_size)]))
        return kept

    def loaded(self, seq: Sequence, tokens: int) -> None:
        swapped = seq in self.swapped
        super().loaded(seq, tokens)
        if swapped:
            self._ins.append((seq, tokens))

    def apply(self) -> None:
        """The step's copies, before its forward pass: out to host, then back in."""
        pool = self.cache.pool  # [layers, 2, kv_heads, blocks, block_size, head_dim]
        for seq, ids in self._outs:
            index = torch.tensor(ids, dtype=torch.int64, device=pool.device)
            self.host[seq] = pool.index_select(3, index).to("cpu", copy=True)
            self.bytes_copied += self.host[seq].numel() * self.host[seq].element_size()
        self._outs.clear()
        bs = self.block_size
        for seq, tokens in self._ins:
            data = self.host.pop(seq)
            if not tokens:  # the GPU's cache covered it, or it left while waiting
                continue
            # It was admitted with its first num_computed - tokens tokens cached on the GPU
            # (whole blocks) and the rest loaded from here: those blocks come back.
            first, last = (seq.num_computed - tokens) // bs, blocks_for(seq.num_computed, bs)
            index = torch.tensor(seq.block_table[first:last], dtype=torch.int64, device=pool.device)
            pool.index_copy_(3, index, data[:, :, :, first:last].to(pool.device))
            self.bytes_copied += data[:, :, :, first:last].numel() * data.element_size()
        self._ins.clear()
