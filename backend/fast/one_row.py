"""A one-sequence decode step (one row, no prefill) with as few torch calls as the
reference's arithmetic allows: on a CPU its GEMMs stream the weights near the copy
bandwidth, and what kept the step at 60-74% of that floor was the ~8 ms of small ops and
Python around them (docs/results/2026-12-06-backend-engine.md).

What it saves against the general step (the same weights, kernels and cache):
- metadata: the position and the sequence's block ids up to it; no decode groups,
  padding masks or numpy concatenations;
- K and V written with one index_copy_ and gathered with one index_select (the pool's
  K and V planes share the kv-head dimension), only the blocks the row attends
  (the window's, on a sliding-window layer), into a reused workspace;
- attention on exactly the attended keys (a slice, no mask): one SDPA call with the
  grouped-query trick, the g heads sharing a kv head as g query rows;
- rotary in place on q and k (halves swapped by one flip, the sign in the sin table);
- rotary tables selected by the position (an int, no index tensor), no row gather
  before the LM head.
The arithmetic is the reference's, op for op, so greedy tokens are the same and logits
agree to float32 rounding (tests/test_backend_fast_one_row.py).

On a CPU in float32 a dense model's whole step is one C call, matrix-vector products
included (one_row_step.py); a mixture-of-experts model's work between the GEMMs runs as
three C functions (one_row_native.py: a torch op right after a GEMM runs with cold
caches), attention reading the pool in place through the block table. The torch ops
above are the fallback where no C compiler is found."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from batchlab.backend.fast.one_row_native import native_lib
from batchlab.backend.fast.one_row_step import WholeStep
from batchlab.backend.fast.one_row_step import fits as step_fits


@dataclass
class OneRowMeta:
    """A decode step of one sequence: its new token's position and the block ids of the
    sequence from its first block to the one holding the position."""
    position: int
    table: torch.Tensor  # [position // block_size + 1] int64
    block_size: int
    num_rows: int = 1
    layout: str = "one_row"

    def keys(self, window: int | None) -> tuple[torch.Tensor, int, int]:
        """The blocks holding keys [max(0, ctx - window), ctx) where ctx = position + 1,
        the first key's offset within them, and the key count."""
        ctx = self.position + 1
        lo = 0 if window is None else max(0, ctx - window)
        first = lo // self.block_size
        return self.table[first:], lo - first * self.block_size, ctx - lo

    @property
    def slot(self) -> int:
        """The flat cache slot of the new token's K/V."""
        return int(self.table[-1]) * self.block_size + self.position % self.block_size


def plan_one_row(position: int, table: list[int], block_size: int, device: torch.device) -> OneRowMeta:
    return OneRowMeta(position, torch.tensor(table[:position // block_size + 1], dtype=torch.int64,
                                             device=device), block_size)


class OneRowDecode:
    """Runs ModelRunner's forward pass for one decode row (runner: its weights)."""

    def __init__(self, runner, native: bool = True, whole: bool = True) -> None:
        """native: run the work between GEMMs in C where it can (float32 on a CPU); whole:
        and the whole step as one C call where the runner kept dense weights (one_row_step.py)."""
        self.r = runner
        self._work = torch.empty(0, dtype=runner.dtype, device=runner.device)
        fits = native and runner.device.type == "cpu" and runner.dtype == torch.float32
        self.lib = native_lib() if fits else None
        self.whole = WholeStep(runner, self.lib) if self.lib is not None and whole and step_fits(runner) else None
        if self.lib is not None:
            inter = max((lw.down.in_features for lw in runner.layers if lw.down is not None), default=1)
            new = lambda n: torch.zeros(1, n, dtype=runner.dtype)  # noqa: E731
            self._h, self._attn, self._y = new(runner.hidden), new(runner.num_heads * runner.head_dim), new(inter)
            self._scores = new(1)
            self._norms = [(lw.ln1.contiguous(), lw.ln2.contiguous()) for lw in runner.layers]

    def plan(self, position: int, table: list[int], cache) -> OneRowMeta:
        return plan_one_row(position, table, cache.block_size, self.r.device)

    def _attend(self, layer: int, qkv: torch.Tensor, meta: OneRowMeta, cache, window) -> torch.Tensor:
        """qkv [heads + 2 kv_heads, dim] (q, k roped) -> attention output [1, heads * dim]."""
        r = self.r
        nh, kvh, d = r.num_heads, r.num_kv_heads, r.head_dim
        bs, nb = cache.block_size, cache.num_blocks
        pool = cache.pool[layer]  # [2, kvh, blocks, bs, d]: K and V planes
        slot = torch.tensor([meta.slot], device=r.device)
        pool.view(2 * kvh, nb * bs, d).index_copy_(1, slot, qkv[nh:].view(2 * kvh, 1, d))
        ids, off, n = meta.keys(window)
        need = 2 * kvh * ids.numel() * bs * d
        if self._work.numel() < need:
            self._work = torch.empty(need, dtype=r.dtype, device=r.device)
        kv = self._work[:need].view(2 * kvh, ids.numel(), bs * d)
        torch.index_select(pool.view(2 * kvh, nb, bs * d), 1, ids, out=kv)
        kv = kv.view(2, kvh, ids.numel() * bs, d)[:, :, off:off + n]
        q = qkv[:nh].view(kvh, nh // kvh, d)
        return F.scaled_dot_product_attention(q, kv[0], kv[1]).reshape(1, nh * d)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, meta: OneRowMeta, cache) -> torch.Tensor:
        """input_ids [1] -> logits [1, vocab] (float32)."""
        r = self.r
        r.ensure_rope(meta.position)
        if self.lib is not None and cache.pool.is_contiguous() and cache.pool.dtype == torch.float32:
            if self.whole is not None:
                return self.whole(int(input_ids[0]), meta.position, meta.table, cache)
            return self._forward_native(input_ids, meta, cache)
        nh, kvh, d, hid, eps = r.num_heads, r.num_kv_heads, r.head_dim, (r.hidden,), r.eps
        nq, half = nh + kvh, d // 2
        cos, sin = r._cos[meta.position], r._sin[meta.position]
        x = F.embedding(input_ids, r.embed)
        for i, lw in enumerate(r.layers):
            h = F.rms_norm(x, hid, lw.ln1, eps)
            qkv = lw.qkv(h).view(nh + 2 * kvh, d)
            qk = qkv[:nq]
            swapped = qk.view(nq, 2, half).flip(1).view(nq, d)  # rotate_half, sign in sin
            qk.mul_(cos).addcmul_(swapped, sin)
            x = lw.o(self._attend(i, qkv, meta, cache, lw.window), residual=x)
            h = F.rms_norm(x, hid, lw.ln2, eps)
            if lw.moe is not None:
                x = x + lw.moe(h)
                continue
            gate, up = lw.gate_up(h).chunk(2, dim=-1)
            x = lw.down(F.silu(gate).mul_(up), residual=x)
        return r.lm_head(F.rms_norm(x, hid, r.norm, eps)).float()

    def _forward_native(self, input_ids: torch.Tensor, meta: OneRowMeta, cache) -> torch.Tensor:
        """forward's arithmetic with the work between GEMMs in C (one_row_native.py)."""
        r, lib = self.r, self.lib
        nh, kvh, d, eps = r.num_heads, r.num_kv_heads, r.head_dim, r.eps
        bs, nb = cache.block_size, cache.num_blocks
        most = meta.position + 1
        if self._scores.numel() < most:
            self._scores = torch.empty(1, 2 * most, dtype=r.dtype)
        h, attn, y = self._h, self._attn, self._y
        hp, ap, yp, sp = h.data_ptr(), attn.data_ptr(), y.data_ptr(), self._scores.data_ptr()
        esize = cache.pool.element_size()
        cosp = r._cos.data_ptr() + meta.position * d * esize
        sinp = r._sin.data_ptr() + meta.position * d * esize
        layer_bytes = cache.pool[0].numel() * esize
        pool0, slot = cache.pool.data_ptr(), meta.slot
        x = F.embedding(input_ids, r.embed)
        for i, lw in enumerate(r.layers):
            ln1, ln2 = self._norms[i]
            lib.rms_norm(x.data_ptr(), ln1.data_ptr(), hp, r.hidden, eps)
            qkv = lw.qkv(h)
            ids, off, n = meta.keys(lw.window)
            lib.attend(qkv.data_ptr(), pool0 + i * layer_bytes, slot, ids.data_ptr(), off, off + n,
                       cosp, sinp, nh, kvh, d, bs, nb, sp, ap)
            x = lw.o(attn, residual=x)
            lib.rms_norm(x.data_ptr(), ln2.data_ptr(), hp, r.hidden, eps)
            if lw.moe is not None:
                x = x + lw.moe(h)
                continue
            gu = lw.gate_up(h)
            lib.silu_mul(gu.data_ptr(), yp, lw.down.in_features)
            x = lw.down(y[:, :lw.down.in_features], residual=x)
        lib.rms_norm(x.data_ptr(), r.norm.data_ptr(), hp, r.hidden, eps)
        return r.lm_head(h).float()
