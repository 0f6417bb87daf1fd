"""The roofline's option group (simulate, capacity): what the roofline assumes,
settable from the command line as well as TOML: the efficiencies, the step overhead,
the collective latency, the dtypes served (experiments/setup/ applies them)."""
from __future__ import annotations

import argparse

from batchlab.experiments.workload_options import add_rows


def _microseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected microseconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected microseconds >= 0, got {text!r}")
    return value * 1e-6


# The group's options, in workload_options.ROWS' form.
ROWS = (
    "GPU pricing (ignored with --profile)",
    ("--cost", "hw_cost", ("auto", "gpu-profile", "roofline"), None,
     "gpu-profile: constants fitted on measured GPUs (shipped per preset); roofline: the assumed "
     "efficiencies below; auto (default): gpu-profile unless a roofline constant is given"),
    ("--gpu-profile", "hw_gpu_profile", None, "FILE",
     "a GPU profile (batchlab calibrate --from-operators) instead of the shipped one"),
    ("--mem-efficiency", "hw_mem_efficiency", float, "F",
     "achieved share of datasheet memory bandwidth (default 0.8)"),
    ("--compute-efficiency", "hw_compute_efficiency", float, "F",
     "achieved share of datasheet FLOP/s (default 0.6)"),
    ("--step-overhead", "hw_step_overhead_s", float, "S",
     "fixed cost of every step in seconds (default 0.002)"),
    ("--collective-latency-us", "hw_allreduce_latency_s", _microseconds, "US",
     "fixed cost of one TP all-reduce (default: the preset's, 45)"),
    ("--dtype", "mo_dtype", None, "DTYPE",
     "weights: bf16 | fp16 | fp8 (default: the preset's, bf16)"),
    ("--kv-cache-dtype", "mo_kv_cache_dtype", None, "DTYPE",
     "KV cache: auto (as the weights) | bf16 | fp16 | fp8"),
)


def add_roofline_options(parser: argparse.ArgumentParser) -> None:
    add_rows(parser, ROWS)
