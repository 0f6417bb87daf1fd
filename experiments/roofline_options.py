"""What the roofline assumes, settable from the command line as well as TOML: the
efficiencies, the step overhead, the collective latency, the dtypes served."""
from __future__ import annotations

import argparse

from batchlab.core.specs import ModelSpec, canonical_dtype, with_dtypes
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError


def _microseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected microseconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected microseconds >= 0, got {text!r}")
    return value * 1e-6


def add_roofline_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("roofline (ignored with --profile)")
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


def served_dtypes(cfg: ExperimentConfig, preset: ModelSpec) -> tuple[str, str]:
    """(weights, KV cache) dtypes: [model] dtype if the user set it, else the preset's."""
    native = {1: "fp8", 2: "bf16", 4: "fp32"}[preset.dtype_bytes]
    try:
        weights = canonical_dtype(cfg.model.dtype) if "dtype" in cfg.model.model_fields_set else native
        kv = weights if cfg.model.kv_cache_dtype == "auto" else canonical_dtype(cfg.model.kv_cache_dtype)
    except ValueError as e:
        raise UserError(f"[model] dtype / kv_cache_dtype: {e}") from None
    for name, d in (("dtype", weights), ("kv_cache_dtype", kv)):
        if d == "fp32" and native != "fp32":
            raise UserError(f"[model] {name} = fp32: the simulator prices GPU serving in bf16, "
                            f"fp16 or fp8 (fp32 is the CPU backend's dtype)")
    return weights, kv


def served_model(cfg: ExperimentConfig, preset: ModelSpec) -> tuple[ModelSpec, str, str]:
    weights, kv = served_dtypes(cfg, preset)
    return with_dtypes(preset, weights, kv), weights, kv
