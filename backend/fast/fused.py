"""Elementwise work fused by torch.compile: RMSNorm, rotary on q and k together, and
SiLU(gate) * up, each one kernel instead of 2-6 (the residual adds already ride on the
GEMMs, backend/linear.py). Compiled with a dynamic row count: one compile per function
and dtype, seconds on a CPU.

On a CPU a compiled call costs ~40-50 us of guards and dispatch where the eager ops of a
one-row step cost ~5-10 us; the fused kernels break even at ~256 rows and pay at ~1024
(2x for the norm and rotary there), so below MIN_ROWS_CPU rows the eager ops run (measured in
docs/results/2026-12-06-backend-engine.md). On a GPU the fused kernels always run (and
CUDA graphs capture them)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

MIN_ROWS_CPU = 1024


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """F.rms_norm's result, computed in float32 as transformers does, then cast."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x*cos + rotate_half(x)*sin, the sign of rotate_half folded into sin (see
    ModelRunner._rope_tables); halves swapped by cat (inductor lowers roll ~15x slower)."""
    h = x.shape[-1] // 2
    return x * cos + torch.cat([x[..., h:], x[..., :h]], dim=-1) * sin


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


class FusedOps:
    """The three fused kernels, or the eager ops below a row count."""

    def __init__(self, device: torch.device) -> None:
        self.min_rows = MIN_ROWS_CPU if device.type == "cpu" else 1
        self.rms_norm = torch.compile(rms_norm, dynamic=True)
        self.rope = torch.compile(rope, dynamic=True)
        self.silu_mul = torch.compile(silu_mul, dynamic=True)

    def use(self, rows: int) -> bool:
        return rows >= self.min_rows
