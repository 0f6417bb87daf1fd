"""Attention over the paged KV cache for one step of many sequences, unpadded.

A step's tokens are laid out as rows: first every one-token item (decodes, sorted by
context length), then each prefill chunk. Per layer:
- one-token items, in a few groups of similar context length: gather each group's
  blocks into one [kv_heads, seqs, tokens, dim] tensor and run one SDPA call with the
  grouped-query trick (the g query heads sharing a kv head are g query rows), masking
  each row's padding. Groups bound the padding: one group for lengths 50..2000 would
  copy mostly padding.
- a prefill chunk starting at 0 attends to its own fresh K/V, causally, no gather;
  a later chunk (chunked prefill, or a recompute longer than one chunk) gathers its
  blocks and uses an explicit causal mask offset by its start.
That gather is the reference path. The paged layout (layout="paged", backend/fast/
paged_flex.py) reads the pool in place instead: one FlexAttention call for all decode
rows, one per prefill chunk that is not fresh."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from batchlab.backend.fast.paged_flex import (PagedDecode, PagedPrefill, decode_attention, plan_decode,
                                              pool_view, prefill_attention)
from batchlab.backend.kv_cache import PagedKVCache

# Fixed cost of one more decode group, in bytes of padded KV it would have to save to
# pay off: about 4 torch calls per layer (~60 us) at ~15 GB/s.
GROUP_OVERHEAD_BYTES = 1 << 20
MAX_DECODE_GROUPS = 4


@dataclass
class DecodeGroup:
    row0: int
    n: int
    block_ids: torch.Tensor  # [n * blocks]: padded block tables, flattened
    ctx: torch.Tensor  # [n, 1, 1]: keys each row attends (its position + 1)
    padded: bool  # some row is shorter than the group's width
    masks: dict = field(default_factory=dict)

    def mask(self, width: int, window: int | None) -> torch.Tensor | None:
        if not self.padded and window is None:
            return None
        if window not in self.masks:
            keys = torch.arange(width, device=self.ctx.device)
            m = keys < self.ctx
            if window is not None:
                m &= keys >= self.ctx - window
            self.masks[window] = m[None]  # [1, n, 1, width] broadcasts over [kv_heads, n, g, width]
        return self.masks[window]


@dataclass
class PrefillChunk:
    row0: int
    n: int
    start: int
    block_ids: torch.Tensor | None  # blocks covering [0, start + n); None when start == 0
    masks: dict = field(default_factory=dict)
    paged: PagedPrefill | None = None  # the in-place kernel's plan (layout "paged")

    def fresh(self, window: int | None) -> bool:
        """Attends only to its own new tokens (is_causal on fresh K/V, no gather)."""
        return self.start == 0 and (window is None or self.n <= window)

    def mask(self, width: int, window: int | None) -> torch.Tensor:
        if window not in self.masks:
            dev = self.block_ids.device if self.block_ids is not None else None
            pos = torch.arange(self.start, self.start + self.n, device=dev)[:, None]
            keys = torch.arange(width, device=dev)
            m = keys <= pos
            if window is not None:
                m &= keys > pos - window
            self.masks[window] = m
        return self.masks[window]


@dataclass
class AttentionMetadata:
    """Everything attention needs about a step, built once and shared by all layers."""
    slots: torch.Tensor  # [T]: flat cache slot of each row's new K/V
    decodes: list[DecodeGroup]
    prefills: list[PrefillChunk]
    num_rows: int
    paged_decode: PagedDecode | None = None  # layout "paged": all decode rows, read in place
    layout: str = "gather"  # which attention function reads it: paged_attention or inplace_attention


def _slots(table: list[int], start: int, n: int, bs: int) -> np.ndarray:
    pos = np.arange(start, start + n)
    return np.asarray(table, dtype=np.int64)[pos // bs] * bs + pos % bs


def _split(nblocks: np.ndarray, row_bytes: int) -> list[int]:
    """Cut points for sorted per-row block counts: the equal-count split into 1..4 groups
    that copies the fewest padded bytes, counting each group's fixed cost."""
    n = len(nblocks)
    best, best_cuts = None, [0, n]
    for k in range(1, min(MAX_DECODE_GROUPS, n) + 1):
        cuts = [round(i * n / k) for i in range(k + 1)]
        cost = sum((b - a) * int(nblocks[b - 1]) * row_bytes for a, b in zip(cuts, cuts[1:]))
        cost += k * GROUP_OVERHEAD_BYTES
        if best is None or cost < best:
            best, best_cuts = cost, cuts
    return best_cuts


LAYOUTS = ("gather", "paged")


def build_metadata(decodes: list[tuple[int, list[int]]], prefills: list[tuple[int, int, list[int]]],
                   cache: PagedKVCache, layout: str = "gather",
                   decode_rows: int | None = None, inplace_prefill: bool = True) -> AttentionMetadata:
    """decodes: (position, block_table) of one-token items, sorted by position; prefills:
    (start, num_tokens, block_table). Rows follow that order: decodes, then prefills.
    layout: "gather" (the reference) or "paged"; decode_rows: the paged kernel's padded
    row count (default: sizes.kernel_rows); inplace_prefill: under "paged", later prefill
    chunks read in place too (else they gather, as in the reference)."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown attention layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    bs, dev = cache.block_size, cache.device
    slot_parts: list[np.ndarray] = []
    groups: list[DecodeGroup] = []
    paged_decode = None
    if decodes and layout == "paged":
        slot_parts.append(np.fromiter((t[p // bs] * bs + p % bs for p, t in decodes), dtype=np.int64,
                                      count=len(decodes)))
        paged_decode = plan_decode(decodes, bs, cache.num_blocks, dev, decode_rows)
    elif decodes:
        pos = np.fromiter((p for p, _ in decodes), dtype=np.int64, count=len(decodes))
        tables = [t for _, t in decodes]
        slot_parts.append(np.fromiter(
            (t[p // bs] * bs + p % bs for p, t in zip(pos.tolist(), tables)), dtype=np.int64,
            count=len(decodes)))
        nblocks = pos // bs + 1
        row_bytes = 2 * bs * cache.kv_heads * cache.head_dim * cache.pool.element_size()
        cuts = _split(nblocks, row_bytes)
        for a, b in zip(cuts, cuts[1:]):
            width = int(nblocks[b - 1])
            ids = np.zeros((b - a, width), dtype=np.int64)  # padding reads block 0, masked
            for r in range(a, b):
                k = int(nblocks[r])
                ids[r - a, :k] = tables[r][:k]
            ctx = pos[a:b] + 1
            groups.append(DecodeGroup(
                a, b - a, torch.from_numpy(ids.reshape(-1)).to(dev),
                torch.from_numpy(ctx).to(dev).view(-1, 1, 1),
                padded=bool(ctx[0] != width * bs)))
    chunks: list[PrefillChunk] = []
    row = len(decodes)
    for start, n, table in prefills:
        slot_parts.append(_slots(table, start, n, bs))
        ids = None
        if start > 0 or n > 1:
            k = -(-(start + n) // bs)
            ids = torch.tensor(table[:k], dtype=torch.int64, device=dev)
        paged = (PagedPrefill(start, n, list(table[:-(-(start + n) // bs)]), bs, cache.num_blocks, dev)
                 if layout == "paged" and inplace_prefill and ids is not None else None)
        chunks.append(PrefillChunk(row, n, start, ids, paged=paged))
        row += n
    slots = torch.from_numpy(np.concatenate(slot_parts) if slot_parts else np.zeros(0, np.int64))
    return AttentionMetadata(slots.to(dev), groups, chunks, row, paged_decode, layout)


def paged_attention(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    meta: AttentionMetadata, cache: PagedKVCache,
                    window: int | None = None) -> torch.Tensor:
    """q [T, heads, dim], k/v [T, kv_heads, dim] of this step's rows -> [T, heads * dim].
    Writes the new K/V into the cache first, so every row attends to itself too."""
    T, nh, d = q.shape
    kvh = k.shape[1]
    g = nh // kvh
    cache.write(layer, meta.slots, k, v)
    out = q.new_empty(T, nh, d)
    for grp in meta.decodes:
        K, V = cache.gather(layer, grp.block_ids, grp.n)  # [kvh, n, width, d]
        # contiguous q and a 4-D mask let torch pick its fused CPU kernel (not the math
        # path, which rescales all of K every call)
        qg = q[grp.row0:grp.row0 + grp.n].view(grp.n, kvh, g, d).transpose(0, 1).contiguous()
        o = F.scaled_dot_product_attention(qg, K, V, attn_mask=grp.mask(K.shape[2], window))
        out[grp.row0:grp.row0 + grp.n].view(grp.n, kvh, g, d).copy_(o.transpose(0, 1))
    for ch in meta.prefills:
        r = slice(ch.row0, ch.row0 + ch.n)
        out[r] = _prefill_chunk(layer, q[r], k[r], v[r], ch, cache, window, g)
    return out.view(T, nh * d)


def _prefill_chunk(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ch: PrefillChunk,
                   cache: PagedKVCache, window: int | None, g: int) -> torch.Tensor:
    """One prefill chunk's attention [n, heads, dim]: causal on its fresh K/V, or over
    its gathered blocks."""
    qp = q.transpose(0, 1)[None]  # [1, heads, n, d]
    if ch.fresh(window):
        o = F.scaled_dot_product_attention(qp, k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                           is_causal=ch.n > 1, enable_gqa=g > 1)
    else:
        K, V = cache.gather(layer, ch.block_ids, 1)  # [kvh, 1, width, d]
        o = F.scaled_dot_product_attention(qp, K.transpose(0, 1), V.transpose(0, 1),
                                           attn_mask=ch.mask(K.shape[2], window), enable_gqa=g > 1)
    return o[0].transpose(0, 1)


def inplace_attention(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      meta: AttentionMetadata, cache: PagedKVCache,
                      window: int | None = None) -> torch.Tensor:
    """paged_attention's contract, reading the pool in place (metadata of layout "paged"):
    no gather; a fresh chunk attends to its own K/V as in the reference."""
    T, nh, d = q.shape
    g = nh // k.shape[1]
    cache.write(layer, meta.slots, k, v)
    K, V = pool_view(cache.pool[layer, 0]), pool_view(cache.pool[layer, 1])
    out = q.new_empty(T, nh, d)
    pd = meta.paged_decode
    if pd is not None:
        out[:pd.rows] = decode_attention(q[:pd.rows], K, V, pd, window)
    for ch in meta.prefills:
        r = slice(ch.row0, ch.row0 + ch.n)
        if ch.paged is None or ch.fresh(window):
            out[r] = _prefill_chunk(layer, q[r], k[r], v[r], ch, cache, window, g)
        else:
            out[r] = prefill_attention(q[r], K, V, ch.paged, window)
    return out.view(T, nh * d)
