"""Which parts of the fast path a runtime uses. The defaults are the reference path
(gather attention, eager elementwise, no graphs): the backend's outputs and timings stay
what they were unless a flag asks."""
from __future__ import annotations

from dataclasses import dataclass

import torch

ATTENTION_CHOICES = ("gather", "paged")


@dataclass(frozen=True)
class FastPath:
    attention: str = "gather"  # "gather": the reference; "paged": read the pool in place
    fuse: bool = False  # compiled RMSNorm, rotary, SiLU-mul
    cuda_graphs: bool = False  # replay decode steps (needs a CUDA device, paged attention)
    one_row: bool = False  # a one-sequence decode step by its own few-op forward (one_row.py)

    @staticmethod
    def fast(device: torch.device) -> FastPath:
        """Everything the device supports: graphs on a GPU, the one-row decode elsewhere."""
        gpu = device.type == "cuda"
        return FastPath("paged", True, gpu, one_row=not gpu)

    def check(self, device: torch.device) -> FastPath:
        """This choice for `device`, or a one-line ValueError naming the setting."""
        if self.attention not in ATTENTION_CHOICES:
            raise ValueError(f"unknown attention {self.attention!r}: expected one of "
                             f"{', '.join(ATTENTION_CHOICES)}")
        if self.cuda_graphs and device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device; this backend runs on {device} "
                             f"(set cuda_graphs=False)")
        if self.cuda_graphs and self.attention != "paged":
            raise ValueError("CUDA graphs replay the paged attention kernel: set attention='paged'")
        return self

    def label(self) -> str:
        parts = [f"attention {self.attention}", "fused" if self.fuse else "eager elementwise"]
        parts += ["cuda graphs"] if self.cuda_graphs else []
        return ", ".join(parts + (["one-row decode"] if self.one_row else []))
