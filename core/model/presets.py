"""Model and hardware presets by name: the dense Llama-family shapes below, the
config.json files of core/model/presets/models (core/model/config_json.py reads them, and any other
one given as a file or a directory), and the hardware catalogue (core/model/hardware.py)."""
from __future__ import annotations

import os
from pathlib import Path

from batchlab.core.checks import shown
from batchlab.core.model.hardware import HARDWARE, HardwareSpec
from batchlab.core.model.config_json import spec_from_file
from batchlab.core.model.spec import ModelSpec

__all__ = ["DTYPES", "MODELS", "canonical_dtype", "is_model_path", "lookup_hardware", "lookup_model",
           "with_dtypes"]


# Serving dtypes the roofline prices: bytes per element. float32 is the backend's CPU
# dtype (the embedded models); a GPU serves in 16 or 8 bits.
DTYPES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}
DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float8": "fp8",
                 "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "float32": "fp32"}


def canonical_dtype(name: str) -> str:
    """bf16 | fp16 | fp8 | fp32 from a dtype name as vLLM or torch spell it."""
    d = DTYPE_ALIASES.get(name.lower(), name.lower())
    if d not in DTYPES:
        raise ValueError(f"unknown dtype {shown(name)}; expected one of bf16, fp16, fp8 "
                         f"(or bfloat16, float16, float8)")
    return d


def with_dtypes(model: ModelSpec, weights: str, kv: str) -> ModelSpec:
    """The model served with weights and KV cache in these dtypes (DTYPES keys)."""
    return model.model_copy(update={"dtype_bytes": DTYPES[weights], "kv_dtype_bytes": DTYPES[kv]})


def _llama(name, L, h, nh, nkv, inter, vocab, ctx, tied=False, hd=None) -> ModelSpec:
    return ModelSpec(name=name, num_layers=L, hidden_size=h, num_heads=nh, num_kv_heads=nkv,
                     head_dim=hd or h // nh, intermediate_size=inter, vocab_size=vocab,
                     max_context=ctx, tied_embeddings=tied)


MODELS: dict[str, ModelSpec] = {m.name: m for m in [
    _llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
    _llama("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
    _llama("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
    _llama("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
    _llama("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
    # Llama 3.1: the same shapes, RoPE scaled to a 128k context.
    _llama("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, 131072),
    _llama("llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256, 131072),
    _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 32768),
    _llama("qwen2.5-0.5b", 24, 896, 14, 2, 4864, 151936, 32768, tied=True),
    _llama("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, 32768),
    # The backend's embedded models (seeded random weights, float32 on CPU).
    _llama("batchlab-tiny", 6, 256, 8, 4, 768, 32000, 8192).model_copy(update={"dtype_bytes": 4}),
    _llama("batchlab-small", 12, 768, 12, 4, 2048, 32000, 8192).model_copy(update={"dtype_bytes": 4}),
    # A separate draft for batchlab-tiny (speculative decoding): its vocabulary, its own shape.
    _llama("batchlab-tiny-draft", 2, 128, 4, 2, 384, 32000, 8192).model_copy(update={"dtype_bytes": 4}),
]}
# The presets shipped as config.json files (core/model/presets/models, sources in SOURCES.toml).
PRESET_CONFIGS = Path(__file__).parent / "presets" / "models"
MODELS.update((f.stem, spec_from_file(f, f.stem)) for f in sorted(PRESET_CONFIGS.glob("*.json")))
# The backend's embedded models among them run in float32 on CPU.
MODELS.update((n, m.model_copy(update={"dtype_bytes": 4})) for n, m in MODELS.items()
              if n.startswith("batchlab-") and m.architecture != "llama")

def is_model_path(name: str) -> bool:
    """A model given as a directory or a config.json file rather than a preset name."""
    return name not in MODELS and (os.sep in name or name.startswith(".") or name.endswith(".json")
                                   or os.path.exists(name))


def lookup_model(name: str) -> ModelSpec:
    """A preset by name, or any Hugging Face config.json: the file, or the directory
    holding it (named after the directory)."""
    if name in MODELS:
        return MODELS[name]
    if is_model_path(name):
        return spec_from_file(name)
    raise ValueError(f"unknown model preset {shown(name)}; expected one of {', '.join(MODELS)}, "
                     f"or a directory holding a config.json (or the file)")


def lookup_hardware(name: str) -> HardwareSpec:
    if name not in HARDWARE:
        raise ValueError(f"unknown hardware preset {shown(name)}; expected one of {', '.join(HARDWARE)}")
    return HARDWARE[name]
