"""y = x W^T (+ b) (+ residual), with the fastest kernel torch offers for the device.

On CPU in float32, oneDNN with weights prepacked once (the kernel torch's own compiler
uses for frozen CPU graphs) beats the default MKL path for the thin matrices of decode
steps: measured 2-4x on 4-16 rows (MKL runs 1-3 rows as separate matrix-vector
products) and ~2x on the LM head at 64 rows. It agrees with F.linear to float32
rounding. Elsewhere (cuda, other dtypes, a torch without oneDNN) F.linear/addmm.

oneDNN creates (and caches, 1024 entries) a kernel per row count: a server meeting every
prompt length paid that creation in its prefill steps and grew by each new shape's kernel
(docs/results/2026-12-06-serve-soak.md). So above EXACT_ROWS (a decode batch: each its own
shape) the rows are padded with zeros to the next of eight sizes an octave, as serving
engines pad steps to their captured sizes: at most 1/8 more rows, and a bounded set of
shapes (~120 per weight up to 8192 rows). Each row's result is the unpadded one's."""
from __future__ import annotations

import torch
import torch.nn.functional as F

MATMUL_CHOICES = ("auto", "onednn", "torch")
_PACK_ROWS = 64  # the batch size oneDNN packs for; any row count runs on the result
EXACT_ROWS = 64


def onednn_available() -> bool:
    return (torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


def resolve_matmul(choice: str, device: torch.device, dtype: torch.dtype) -> str:
    """'onednn' or 'torch' for this device and dtype."""
    if choice not in MATMUL_CHOICES:
        raise ValueError(f"unknown matmul kernel {choice!r}: expected one of {', '.join(MATMUL_CHOICES)}")
    fits = device.type == "cpu" and dtype == torch.float32 and onednn_available()
    if choice == "onednn" and not fits:
        raise ValueError("matmul 'onednn' needs float32 on a CPU with oneDNN; use 'torch'")
    return "onednn" if choice == "onednn" or (choice == "auto" and fits) else "torch"


def padded_rows(rows: int) -> int:
    """The row count a oneDNN matmul of `rows` runs at: itself up to EXACT_ROWS, else
    rounded up to a multiple of an eighth of its octave (65..128 by 8, 129..256 by 16...)."""
    if rows <= EXACT_ROWS:
        return rows
    step = 1 << (rows.bit_length() - 4)
    return -(-rows // step) * step


class Linear:
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, kernel: str,
                 keep_dense: bool = False) -> None:
        """keep_dense: keep the dense row-major weight (`dense`) beside oneDNN's packed
        copy, for code of one's own that reads it (backend/fast/one_row_step.py)."""
        self.out_features, self.in_features = weight.shape
        self.nbytes = weight.numel() * weight.element_size()
        self.bias = bias
        self.kernel = kernel
        self.dense: torch.Tensor | None = None
        if kernel == "onednn":
            # An opaque oneDNN copy: the dense weight is not kept unless asked.
            self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _PACK_ROWS)
            self.dense = weight.detach().contiguous() if keep_dense else None
        else:
            self.weight = self.dense = weight.detach()
            self._wt = self.weight.t()

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if self.kernel == "onednn":
            rows = x.shape[0]
            pad = padded_rows(rows) - rows
            if pad:
                x = F.pad(x, (0, 0, 0, pad))
                residual = None if residual is None else F.pad(residual, (0, 0, 0, pad))
            if residual is not None:
                y = torch.ops.mkldnn._linear_pointwise.binary(x, residual, self.weight, self.bias, "add")
            else:
                y = torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
            return y[:rows] if pad else y
        if residual is not None:
            y = torch.addmm(residual, x, self._wt)  # the residual add rides on the GEMM
            return y if self.bias is None else y.add_(self.bias)
        return F.linear(x, self.weight, self.bias)
