"""The dtypes a model preset is served in: [model] dtype and kv_cache_dtype where the
user set them, else the preset's own."""
from __future__ import annotations

from batchlab.core.model.presets import canonical_dtype, with_dtypes
from batchlab.core.model.spec import ModelSpec
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError


def served_dtypes(cfg: ExperimentConfig, preset: ModelSpec) -> tuple[str, str]:
    """(weights, KV cache) dtypes: [model] dtype if the user set it, else the preset's."""
    native = {1: "fp8", 2: "bf16", 4: "fp32"}[preset.dtype_bytes]
    try:
        weights = canonical_dtype(cfg.model.dtype) if "dtype" in cfg.model.model_fields_set else native
        # auto: the model's own KV dtype where its config declares one (a quantised
        # checkpoint's KV stays 16-bit, as vLLM's auto keeps the model dtype), else the weights'.
        auto = {1: "fp8", 2: "bf16", 4: "fp32"}[preset.kv_dtype_bytes] if preset.kv_dtype_bytes else weights
        kv = auto if cfg.model.kv_cache_dtype == "auto" else canonical_dtype(cfg.model.kv_cache_dtype)
    except ValueError as e:
        raise UserError(f"[model] dtype / kv_cache_dtype: {e}") from None
    for name, d in (("dtype", weights), ("kv_cache_dtype", kv)):
        if d == "fp32" and native != "fp32":
            raise UserError(f"[model] {name} = fp32: the simulator prices GPU serving in bf16, "
                            f"fp16 or fp8 (fp32 is the CPU backend's dtype)")
    return weights, kv


def served_model(cfg: ExperimentConfig, preset: ModelSpec) -> tuple[ModelSpec, str, str]:
    """The preset in its served dtypes, and those dtypes' names."""
    weights, kv = served_dtypes(cfg, preset)
    return with_dtypes(preset, weights, kv), weights, kv
