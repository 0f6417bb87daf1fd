"""Attention that reads the paged KV pool in place: FlexAttention over one layer's whole
pool, seen as one [1, kv_heads, blocks * block_size, dim] sequence, with a block mask
whose kv indices ARE the sequences' block tables (one flex "KV block" = one cache block).
Nothing is gathered: the kernel visits exactly the blocks each query row needs.

- Decode: one call for all one-token rows, one batch row each (padded to a compiled size;
  a padded row visits no block). A row's blocks split into full ones (no mask) and at
  most two partial ones: the last (keys past the row's position) and, under a sliding
  window, the first (keys before the window); the mask names them by physical block.
- A prefill chunk that does not attend only to its own fresh K/V (a later chunk of a
  chunked prefill, a recompute, a windowed chunk): one call, its rows in query blocks of
  Q_BLOCK, each visiting the blocks up to its last row; the mask maps a physical block
  to its logical place through a per-chunk table.
The kernel is torch.compile(flex_attention) (without compile, flex materialises every
score of the pool). Shapes are static per compiled size; positions, windows and tables
enter as tensors so that a new step recompiles nothing."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from batchlab.backend.fast.sizes import kernel_rows, pow2_at_least

Q_BLOCK = 16  # query rows per flex block in a prefill chunk
# Smallest padded query rows of a prefill chunk: an empty query block visits no KV block
# (a few us), while each new shape costs a compile (seconds on a CPU).
MIN_PREFILL_ROWS = 64
# On a CPU the compiled kernel costs ~3 us per row and head before it reads anything
# (SDPA on gathered blocks: ~10 us a call), so it pays only once the gather it saves is
# large: decode rows attend in place from this many gathered bytes a layer (K and V of
# every row's context; measured crossover 8-16 MiB, docs/results/2026-12-06-backend-engine.md),
# else through the gather. Prefill chunks gather on a CPU (flex's prefill ran 1.5x slower
# than gather + SDPA's flash kernel there). On a GPU: everything in place.
INPLACE_MIN_GATHER_BYTES_CPU = 16 << 20
_FAR = 1 << 30  # a window that never closes; the logical place of a block not in the table
_COMPILED: dict[str, object] = {}


def compiled_flex():
    """flex_attention compiled once per process (each new shape compiles once more)."""
    if "flex" not in _COMPILED:
        import torch._dynamo.config as dynamo_config  # lazy: torch's compiler, only on the fast path
        # one compiled shape per padded size and kind; the default of 8 would fall back to
        # the unfused flex, which reads every score of the pool
        dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 64)
        _COMPILED["flex"] = torch.compile(flex_attention, dynamic=False)
    return _COMPILED["flex"]


def _row_blocks(table: list[int], first: int, last: int, lo: int, hi: int, bs: int):
    """(partial, full) physical blocks of a row attending logical blocks first..last, its
    keys starting at offset lo of the first and ending before offset hi of the last."""
    cut_first, cut_last = lo > 0, hi < bs
    if first == last:
        return ([table[first]], []) if cut_first or cut_last else ([], [table[first]])
    partial = ([table[first]] if cut_first else []) + ([table[last]] if cut_last else [])
    return partial, table[first + cut_first:last + 1 - cut_last]


@dataclass
class PagedDecode:
    """The decode rows of a step: positions and block tables, and their block masks (one
    per window size, built when a layer first asks)."""
    ctx: np.ndarray  # [rows]: keys each row attends (its position + 1)
    tables: list[list[int]]
    padded: int  # rows of the kernel call
    block_size: int
    num_blocks: int
    device: torch.device
    masks: dict = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return len(self.tables)

    def block_mask(self, window: int | None) -> BlockMask:
        if window not in self.masks:
            self.masks[window] = self._build(window)
        return self.masks[window]

    def _build(self, window: int | None) -> BlockMask:
        return DecodeMask.of(self.arrays(window), self.device).block_mask(self.block_size, self.num_blocks)

    def arrays(self, window: int | None) -> dict[str, np.ndarray]:
        """The block mask's contents (DecodeMask's fields), padded to `padded` rows."""
        P, bs, nb = self.padded, self.block_size, self.num_blocks
        start = np.maximum(self.ctx - window, 0) if window else np.zeros_like(self.ctx)
        first, last = start // bs, (self.ctx - 1) // bs
        lo, hi = start - first * bs, self.ctx - last * bs
        a = {"part_num": np.zeros((P, 1, 1), np.int32), "part_idx": np.zeros((P, 1, 1, nb), np.int32),
             "full_num": np.zeros((P, 1, 1), np.int32), "full_idx": np.zeros((P, 1, 1, nb), np.int32),
             "first": np.full(P, -1, np.int64), "last": np.full(P, -1, np.int64),
             "lo": np.zeros(P, np.int64), "hi": np.zeros(P, np.int64)}
        for r, table in enumerate(self.tables):
            partial, full = _row_blocks(table, int(first[r]), int(last[r]), int(lo[r]), int(hi[r]), bs)
            a["part_idx"][r, 0, 0, :len(partial)] = partial
            a["full_idx"][r, 0, 0, :len(full)] = full
            a["part_num"][r], a["full_num"][r] = len(partial), len(full)
            a["first"][r], a["last"][r] = table[first[r]], table[last[r]]
        a["lo"][:self.rows], a["hi"][:self.rows] = lo, hi
        return a


@dataclass
class DecodeMask:
    """A decode block mask's tensors. A CUDA graph keeps one set and refills it each step
    (backend/fast/graphs.py): the mask built from them reads whatever they hold."""
    part_num: torch.Tensor  # [rows, 1, 1]: partial blocks of each row
    part_idx: torch.Tensor  # [rows, 1, 1, pool blocks]: their physical ids, first part_num
    full_num: torch.Tensor
    full_idx: torch.Tensor
    first: torch.Tensor  # [rows]: physical id of the first block (-1: a padded row)
    last: torch.Tensor
    lo: torch.Tensor  # [rows]: first key's offset in the first block
    hi: torch.Tensor  # [rows]: keys in the last block

    @staticmethod
    def of(arrays: dict[str, np.ndarray], device: torch.device) -> DecodeMask:
        return DecodeMask(**{k: torch.from_numpy(v).to(device) for k, v in arrays.items()})

    def fill(self, arrays: dict[str, np.ndarray]) -> None:
        for k, v in arrays.items():
            getattr(self, k).copy_(torch.from_numpy(v), non_blocking=True)

    def block_mask(self, bs: int, nb: int) -> BlockMask:
        fp, lp, lo, hi = self.first, self.last, self.lo, self.hi

        def within(b, h, q_idx, kv_idx):
            blk = kv_idx // bs
            off = kv_idx - blk * bs
            return ((blk != fp[b]) | (off >= lo[b])) & ((blk != lp[b]) | (off < hi[b]))

        return BlockMask.from_kv_blocks(self.part_num, self.part_idx, self.full_num, self.full_idx,
                                        BLOCK_SIZE=(1, bs), mask_mod=within, seq_lengths=(1, nb * bs),
                                        compute_q_blocks=False)


def plan_decode(decodes: list[tuple[int, list[int]]], block_size: int, num_blocks: int,
                device: torch.device, padded: int | None = None) -> PagedDecode:
    """decodes: (position, block_table) per row; padded: the kernel's row count (default:
    sizes.kernel_rows)."""
    ctx = np.fromiter((p + 1 for p, _ in decodes), dtype=np.int64, count=len(decodes))
    return PagedDecode(ctx, [t for _, t in decodes], padded or kernel_rows(len(decodes)),
                       block_size, num_blocks, device)


@dataclass
class PagedPrefill:
    """One prefill chunk's block masks (per window size)."""
    start: int
    n: int
    table: list[int]  # blocks covering [0, start + n)
    block_size: int
    num_blocks: int
    device: torch.device
    masks: dict = field(default_factory=dict)

    @property
    def padded(self) -> int:
        return pow2_at_least(self.n, MIN_PREFILL_ROWS)

    def block_mask(self, window: int | None) -> BlockMask:
        if window not in self.masks:
            self.masks[window] = self._build(window)
        return self.masks[window]

    def _build(self, window: int | None) -> BlockMask:
        bs, nb, dev = self.block_size, self.num_blocks, self.device
        nq = self.padded // Q_BLOCK
        idx = np.zeros((nq, nb), np.int32)
        num = np.zeros(nq, np.int32)
        for j in range(nq):
            q0 = self.start + j * Q_BLOCK
            if j * Q_BLOCK >= self.n:
                break
            q1 = self.start + min((j + 1) * Q_BLOCK, self.n) - 1
            b0 = max(q0 - window + 1, 0) // bs if window else 0
            blocks = self.table[b0:q1 // bs + 1]
            idx[j, :len(blocks)] = blocks
            num[j] = len(blocks)
        logical = torch.full((nb,), _FAR, dtype=torch.int64)
        logical[torch.tensor(self.table, dtype=torch.int64)] = torch.arange(len(self.table))
        logical = logical.to(dev)
        start = torch.tensor(self.start, device=dev)
        win = torch.tensor(window or _FAR, device=dev)

        def causal(b, h, q_idx, kv_idx):
            blk = kv_idx // bs
            key = logical[blk] * bs + (kv_idx - blk * bs)
            pos = start + q_idx
            return (key <= pos) & (key > pos - win)

        return BlockMask.from_kv_blocks(
            torch.from_numpy(num).to(dev).view(1, 1, nq), torch.from_numpy(idx).to(dev).view(1, 1, nq, nb),
            BLOCK_SIZE=(Q_BLOCK, bs), mask_mod=causal, seq_lengths=(self.padded, nb * bs),
            compute_q_blocks=False)


def pool_view(pool_layer: torch.Tensor) -> torch.Tensor:
    """[kv_heads, blocks, block_size, dim] -> [1, kv_heads, blocks * block_size, dim]."""
    h, nb, bs, d = pool_layer.shape
    return pool_layer.view(1, h, nb * bs, d)


def _kernel_options(device: torch.device, block_size: int, q_block: int | None) -> dict | None:
    """Triton tile sizes on a GPU: flex asserts that a mask block (a cache block of
    block_size tokens; Q_BLOCK query rows) is a multiple of its tile, and its default
    tiles are 64+ wide. Unverified on a GPU yet (engine_check.sh: BS=128 if 16 fails)."""
    if device.type != "cuda":
        return None
    opts = {"BLOCK_N": block_size} if block_size < 64 else {}
    if q_block is not None:
        opts["BLOCK_M"] = q_block
    return opts or None


def decode_attention(q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, plan: PagedDecode,
                     window: int | None) -> torch.Tensor:
    """q [rows, heads, dim] -> [rows, heads, dim], reading K/V (pool views) in place."""
    n, nh, d = q.shape
    qp = q.new_zeros(plan.padded, nh, 1, d)
    qp[:n, :, 0] = q
    o = compiled_flex()(qp, K, V, block_mask=plan.block_mask(window), enable_gqa=nh != K.shape[1],
                        kernel_options=_kernel_options(q.device, plan.block_size, None))
    return o[:n, :, 0]


def prefill_attention(q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, plan: PagedPrefill,
                      window: int | None) -> torch.Tensor:
    """q [n, heads, dim] of one chunk -> [n, heads, dim]."""
    n, nh, d = q.shape
    qp = q.new_zeros(1, nh, plan.padded, d)
    qp[0, :, :n] = q.transpose(0, 1)
    o = compiled_flex()(qp, K, V, block_mask=plan.block_mask(window), enable_gqa=nh != K.shape[1],
                        kernel_options=_kernel_options(q.device, plan.block_size, Q_BLOCK))
    return o[0, :, :n].transpose(0, 1)
