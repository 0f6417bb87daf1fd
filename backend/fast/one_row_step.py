"""A one-row decode step of a dense model as one C call (one_row_native.py's `step`):
embedding, every layer, the final norm and the LM head, its matrix-vector products too.

Why: with the work between GEMMs in C but the GEMMs in torch, a batchlab-small step
still took ~11 ms over a copy of its weights' bytes (docs/results/2026-12-06-backend-engine.md):
oneDNN's packed GEMMs at one row took ~30% more CPU than a plain matrix-vector product,
and each of ~50 calls a step crossed Python, ctypes and torch's dispatcher with cold
caches right after a GEMM had streamed megabytes of weights. One call a step leaves the
weights' stream and a few kilobytes of activations.

The C matrix-vector product reads dense row-major weights, which oneDNN's packed copies
are not: a runner that takes this path keeps its matrices dense as well (Linear.dense),
twice the weights' memory. Only for dense models (no experts) on a CPU in float32."""
from __future__ import annotations

import ctypes

import torch

from batchlab.backend.fast.one_row_native import native_lib

# The C side's per-layer slots (enum in one_row_native.SOURCE), in order.
SLOTS = ("ln1", "qkv_w", "qkv_b", "o_w", "o_b", "ln2", "gu_w", "gu_b", "down_w", "down_b", "window")


def _ptr(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.data_ptr()


def keeps_dense(one_row: bool, device: torch.device, dtype: torch.dtype, hf: torch.nn.Module) -> bool:
    """Whether a runner of `hf` with these settings takes the whole-step call, and so
    keeps its matrices dense: the one-row decode, a CPU, float32, no experts, a compiler."""
    return (one_row and device.type == "cpu" and dtype == torch.float32
            and not any(hasattr(layer.mlp, "experts") for layer in hf.model.layers)
            and native_lib() is not None)


def fits(runner) -> bool:
    """Whether `runner` can take the whole-step call: dense layers with dense weights kept."""
    lins = [runner.lm_head] + [lin for lw in runner.layers for lin in (lw.qkv, lw.o, lw.gate_up, lw.down)]
    return (runner.device.type == "cpu" and runner.dtype == torch.float32
            and all(lin is not None and lin.dense is not None and lin.dense.is_contiguous() for lin in lins))


class WholeStep:
    """One decode row of `runner` through the C step function `lib.step`."""

    def __init__(self, runner, lib: ctypes.CDLL) -> None:
        r = runner
        self.r, self.lib = r, lib
        self._keep = []  # tensors the pointer table points into, alive with it
        rows = []
        for lw in r.layers:
            ln1, ln2 = lw.ln1.contiguous(), lw.ln2.contiguous()
            self._keep += [ln1, ln2]
            rows.append([_ptr(ln1), _ptr(lw.qkv.dense), _ptr(lw.qkv.bias), _ptr(lw.o.dense), _ptr(lw.o.bias),
                         _ptr(ln2), _ptr(lw.gate_up.dense), _ptr(lw.gate_up.bias), _ptr(lw.down.dense),
                         _ptr(lw.down.bias), lw.window or 0])
        for lin in [lin for lw in r.layers for lin in (lw.qkv, lw.o, lw.gate_up, lw.down)]:
            if lin.bias is not None and not lin.bias.is_contiguous():
                raise ValueError("a bias the C step reads must be contiguous")
        self._layers = torch.tensor(rows, dtype=torch.int64)
        self.inter = r.layers[0].down.in_features if r.layers else 1
        self._embed = r.embed.contiguous()
        self._norm = r.norm.contiguous()
        self._work = torch.empty(0)
        self._dims: tuple[tuple[int, int], torch.Tensor] | None = None  # per pool shape

    def work_floats(self, ctx: int) -> int:
        """The scratch `step` uses at `ctx` keys: x, h, qkv, attention out, gate_up, y, scores."""
        r = self.r
        return (2 * r.hidden + (r.num_heads + 2 * r.num_kv_heads) * r.head_dim + r.num_heads * r.head_dim
                + 3 * self.inter + ctx)

    def __call__(self, token: int, position: int, table: torch.Tensor, cache) -> torch.Tensor:
        """token's logits [1, vocab] (float32), its K/V written at `position` of `table`
        (int64 block ids of the sequence from its first block, covering the position)."""
        r = self.r
        need = self.work_floats(position + 1)
        if self._work.numel() < need:
            self._work = torch.empty(max(need, 2 * self._work.numel()))
        key = (cache.block_size, cache.num_blocks)
        if self._dims is None or self._dims[0] != key:
            self._dims = key, torch.tensor([r.hidden, r.num_heads, r.num_kv_heads, r.head_dim, self.inter,
                                            r.vocab_size, len(r.layers), *key], dtype=torch.int64)
        dims = self._dims[1]
        logits = torch.empty(1, r.vocab_size)
        self.lib.step(token, self._embed.data_ptr(), self._layers.data_ptr(), dims.data_ptr(), r.eps,
                      cache.pool.data_ptr(), table.data_ptr(), position, r._cos.data_ptr(), r._sin.data_ptr(),
                      self._norm.data_ptr(), r.lm_head.dense.data_ptr(), self._work.data_ptr(), logits.data_ptr())
        return logits
