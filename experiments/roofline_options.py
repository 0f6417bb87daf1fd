"""The roofline's option group (simulate, capacity): what the roofline assumes,
settable from the command line as well as TOML: the efficiencies, the step overhead,
the collective latency, the dtypes served (experiments/setup/ applies them)."""
from __future__ import annotations

import argparse


def _microseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected microseconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected microseconds >= 0, got {text!r}")
    return value * 1e-6


def add_roofline_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("GPU pricing (ignored with --profile)")
    g.add_argument("--cost", dest="hw_cost", choices=("auto", "gpu-profile", "roofline"),
                   help="gpu-profile: constants fitted on measured GPUs (shipped per preset); "
                   "roofline: the assumed efficiencies below; auto (default): gpu-profile unless a "
                   "roofline constant is given")
    g.add_argument("--gpu-profile", dest="hw_gpu_profile", metavar="FILE",
                   help="a GPU profile (batchlab calibrate --from-operators) instead of the shipped one")
    g.add_argument("--served-engine", dest="hw_served_engine", metavar="vllm|none|FILE",
                   help="a GPU profile's steps as a served engine runs them: vllm (default: the shipped "
                   "terms: CUDA graphs, its all-reduce, fused kernels, host time), none (the kernels' sum), "
                   "or a served profile (batchlab calibrate --from-served)")
    g.add_argument("--mem-efficiency", dest="hw_mem_efficiency", type=float, metavar="F",
                   help="achieved share of datasheet memory bandwidth (default 0.8)")
    g.add_argument("--compute-efficiency", dest="hw_compute_efficiency", type=float, metavar="F",
                   help="achieved share of datasheet FLOP/s (default 0.6)")
    g.add_argument("--step-overhead", dest="hw_step_overhead_s", type=float, metavar="S",
                   help="fixed cost of every step in seconds (default 0.002)")
    g.add_argument("--collective-latency-us", dest="hw_allreduce_latency_s", type=_microseconds,
                   metavar="US", help="fixed cost of one TP all-reduce (default: the preset's, 45)")
    g.add_argument("--dtype", dest="mo_dtype", metavar="DTYPE",
                   help="weights: bf16 | fp16 | fp8 (default: the preset's, bf16)")
    g.add_argument("--kv-cache-dtype", dest="mo_kv_cache_dtype", metavar="DTYPE",
                   help="KV cache: auto (as the weights) | bf16 | fp16 | fp8")
