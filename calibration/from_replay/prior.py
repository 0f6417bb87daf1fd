"""A prior for a model no profile was measured for (a GPU server, typically): the CPU cost
form (core/cost/fitted.py) with its rates from a hardware preset's datasheet at assumed
efficiencies, the same figures the roofline simulates with (experiments/config.py
HardwareConfig). Only the model's shape and the datasheet are known: every term is an
assumption the fit may move, and where the timings cannot tell a term the datasheet's
value is what stays (said so in the profile's notes)."""
from __future__ import annotations

import datetime

from batchlab.calibration.fit.profile_parts import cost_params, effective
from batchlab.core.cost.dispatch import kv_capacity_blocks
from batchlab.core.cost.fitted import FittedCostModel, Shape
from batchlab.core.cost.profile import DeviceInfo, FitQuality, Profile, RegionError
from batchlab.core.model.hardware import HardwareSpec
from batchlab.core.model.spec import ModelSpec

# Per-sequence and per-chunk costs have no datasheet figure: small fractions of the fixed
# step cost, enough to be scaled by the fit (a prior of 0 could not be).
PER_SEQ_SHARE, PER_CHUNK_SHARE = 0.01, 0.1
BLOCK_SIZE = 16


def roofline_prior(spec: ModelSpec, hw: HardwareSpec, mem_efficiency: float, compute_efficiency: float,
                   step_overhead_s: float) -> Profile:
    dtype = {1: "fp8", 2: "bf16", 4: "fp32"}.get(spec.dtype_bytes, "bf16")
    s_byte = 1.0 / (hw.mem_bandwidth * mem_efficiency)
    model = FittedCostModel(
        Shape.of(spec), overhead_s=step_overhead_s, per_seq_s=step_overhead_s * PER_SEQ_SHARE,
        per_chunk_s=step_overhead_s * PER_CHUNK_SHARE, s_per_weight_byte=s_byte,
        s_per_flop=1.0 / (hw.flops_for("fp8" if dtype == "fp8" else "bf16") * compute_efficiency),
        s_per_kv_byte=s_byte, s_per_attn_flop=1.0 / (hw.peak_flops * compute_efficiency))
    none = RegionError(n=0, median_ape=None, max_ape=None)
    return Profile(
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        model=spec, model_source=spec.name, device=DeviceInfo(kind="cuda", name=hw.name, dtype=dtype),
        block_size=BLOCK_SIZE, num_kv_blocks=kv_capacity_blocks(spec, hw, 1, BLOCK_SIZE),
        cost=cost_params(model), fit=FitQuality(heldout=none, train=none, regions={}),
        effective=effective(model, {}),
        notes=(f"roofline prior: {hw.name} datasheet at {mem_efficiency:.0%} of memory bandwidth and "
               f"{compute_efficiency:.0%} of {dtype} FLOP/s, {step_overhead_s * 1e3:.1f} ms a step; "
               f"per sequence and per chunk {PER_SEQ_SHARE:.0%} and {PER_CHUNK_SHARE:.0%} of it (assumed)"))
