"""The backend's fast path as options ([model] attention, fused, cuda_graphs, one_row_decode; flags on
run, serve, validate and calibrate): backend/fast/options.py FastPath, chosen by the
user. The defaults are the reference path, so a run that names none of them is the run
it was. Checked here, before torch loads, so that an impossible choice is one line
naming the flag. vLLM captures CUDA graphs unless told --enforce-eager (vllm/config/model.py
ModelConfig.enforce_eager = False, vllm-project/vllm at 0052a5b, before v0.13.0); here
graphs are off by default and --enforce-eager says so over a config's `cuda_graphs = true`."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from batchlab.experiments.errors import UserError

ATTENTION = ("gather", "paged")  # backend/fast/options.py ATTENTION_CHOICES (no torch here)


def add_fast_path_options(g: argparse._ArgumentGroup, prefix: str = "mo_") -> None:
    """prefix: the dests' table prefix (mo_: [model]; calibrate has its own flags, "")."""
    g.add_argument("--attention", dest=prefix + "attention", choices=ATTENTION,
                   help="gather (default: the reference, gathers KV blocks then SDPA) | paged "
                        "(FlexAttention reads the paged KV pool in place)")
    g.add_argument("--fused", dest=prefix + "fused", action="store_const", const=True,
                   help="compiled RMSNorm, rotary and SiLU-mul kernels (default: eager ops)")
    g.add_argument("--no-fused", dest=prefix + "fused", action="store_const", const=False,
                   help="eager elementwise ops (the default)")
    g.add_argument("--cuda-graphs", dest=prefix + "cuda_graphs", action="store_const", const=True,
                   help="replay decode steps as CUDA graphs (needs --device cuda and "
                        "--attention paged)")
    g.add_argument("--enforce-eager", dest=prefix + "cuda_graphs", action="store_const", const=False,
                   help="no CUDA graphs (the default; vLLM's name)")
    g.add_argument("--one-row-decode", dest=prefix + "one_row_decode", action="store_const", const=True,
                   help="CPU, float32: a one-sequence decode step in native code (one C call a step for "
                        "a dense model; keeps a dense copy of the weights: twice their memory)")


@dataclass(frozen=True)
class FastChoice:
    """The fast path's settings as the user gave them (backend FastPath's fields)."""
    attention: str = "gather"
    fused: bool = False
    cuda_graphs: bool = False
    one_row_decode: bool = False

    @property
    def default(self) -> bool:
        return self == FastChoice()

    def check(self, device: str, table: str | None = "model") -> FastChoice:
        """This choice, or a one-line UserError naming the flag (and the field of `table`,
        where a config file can set it), for `device` as given."""
        def flag(name: str) -> str:
            return f"--{name.replace('_', '-')}" + (f" ({table}.{name})" if table else "")

        if self.attention not in ATTENTION:
            raise UserError(f"{flag('attention')} {self.attention!r}: expected one of {', '.join(ATTENTION)}")
        if self.cuda_graphs and not device.strip().lower().startswith("cuda"):
            raise UserError(f"{flag('cuda_graphs')} needs a CUDA device (--device cuda); this backend "
                            f"runs on {device}: drop it or use --enforce-eager")
        if self.cuda_graphs and self.attention != "paged":
            raise UserError(f"{flag('cuda_graphs')} replays the paged attention kernel: add --attention paged")
        if self.one_row_decode and device.strip().lower().startswith("cuda"):
            raise UserError(f"{flag('one_row_decode')} runs on a CPU; on --device cuda use --cuda-graphs")
        return self

    def fast_path(self):
        """backend FastPath, or None for the reference path (nothing changes)."""
        if self.default:
            return None
        from batchlab.backend.fast.options import FastPath  # lazy: torch, only when serving
        return FastPath(self.attention, self.fused, self.cuda_graphs, one_row=self.one_row_decode)
