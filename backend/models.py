"""Which model the backend runs: an embedded preset with seeded random weights, or a
local Hugging Face checkpoint directory of a supported (Llama-family, Mixtral)
architecture.

The embedded presets are core.model.presets.MODELS entries named batchlab-*, so the simulator
prices exactly the shape the backend executes: Llama shapes (batchlab-tiny, -small), and
the ones shipped as config.json (core/model/presets/models: batchlab-tiny-moe, a Mixtral;
batchlab-tiny-swa, a Qwen2 with alternating sliding-window layers). Timing does not depend on weight values,
which is why random weights are enough to measure; the oracle tests compare against
transformers on the same weights."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from batchlab.backend.checkpoint import check_shape
from batchlab.core.checks import shown
from batchlab.core.model.config_json import read_config_file
from batchlab.core.model.config_json import spec_from_config as core_spec
from batchlab.core.model.presets import MODELS, PRESET_CONFIGS
from batchlab.core.model.spec import ModelSpec

PRESET_PREFIX = "batchlab-"
SUPPORTED_TYPES = ("llama", "mistral", "qwen2", "mixtral")
# RoPE variants whose frequencies change with the sequence length: not reproduced here.
_UNSUPPORTED_ROPE = ("dynamic", "longrope")
MAX_POSITIONS = 8192  # the embedded models' context limit


def preset_names() -> list[str]:
    return [n for n in MODELS if n.startswith(PRESET_PREFIX)]


@dataclass
class LoadedModel:
    """A transformers model (the source of the weights, and the oracle) and its shape."""
    hf: torch.nn.Module
    name: str  # preset name, or the checkpoint directory
    source: str  # "preset" or "checkpoint"
    spec: ModelSpec  # the architecture in the simulator's terms
    seed: int | None = None  # weight seed of a preset


def _rope_type(config) -> str:
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    return str(params.get("rope_type", params.get("type", "default")))


def check_supported(config) -> None:
    """Refuse, with one line, a checkpoint this forward pass would compute wrongly."""
    mtype = getattr(config, "model_type", "?")
    if mtype not in SUPPORTED_TYPES:
        raise ValueError(f"unsupported architecture {mtype!r} "
                         f"({', '.join(getattr(config, 'architectures', None) or [])}); "
                         f"the backend runs {', '.join(SUPPORTED_TYPES)} checkpoints")
    act = getattr(config, "hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"unsupported activation {act!r} in a {mtype} checkpoint; expected silu")
    if _rope_type(config) in _UNSUPPORTED_ROPE:
        raise ValueError(f"unsupported rope type {_rope_type(config)!r}: its frequencies "
                         f"depend on the sequence length")
    if getattr(config, "quantization_config", None):
        raise ValueError("quantized checkpoints are not supported; use a float16/bfloat16/float32 one")


def spec_from_config(name: str, config, dtype: torch.dtype) -> ModelSpec:
    """The simulator's shape of a transformers config (core/model/config_json.py reads it, as
    it reads any config.json), in the dtype the backend runs."""
    spec = core_spec(config.to_dict(), name, f"{name} config")
    return spec.model_copy(update={"dtype_bytes": torch.empty(0, dtype=dtype).element_size(),
                                   "kv_dtype_bytes": None})


def params_label(n: int) -> str:
    """A parameter count as people write it: 140k, 21M, 125M, 7.2B."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f}{unit}" if v >= 10 else f"{v:.1f}{unit}"
    return str(n)


def preset_config(spec: ModelSpec):
    """A LlamaConfig with the preset's shape. No special tokens: generation never stops
    early (EOS is ignored, as in the simulator)."""
    from transformers import LlamaConfig  # lazy: transformers (seconds), only to build a model
    return LlamaConfig(
        vocab_size=spec.vocab_size, hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size, num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads, num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim, max_position_embeddings=MAX_POSITIONS, rms_norm_eps=1e-5,
        tie_word_embeddings=spec.tied_embeddings, bos_token_id=None, eos_token_id=None,
        pad_token_id=None)


def shipped_config(path: Path):
    """A transformers config from a shipped preset's config.json, without special tokens
    (generation never stops early: EOS is ignored, as in the simulator)."""
    from transformers import AutoConfig  # lazy: transformers (seconds), only to build a model
    raw, _ = read_config_file(path)
    fields = {k: v for k, v in raw.items() if k not in ("model_type", "architectures")}
    return AutoConfig.for_model(raw["model_type"], **fields, bos_token_id=None, eos_token_id=None,
                                pad_token_id=None)


def seeded_weights(make, seed: int, dtype: torch.dtype, device: torch.device | str) -> torch.nn.Module:
    """`make(**kw)` (a transformers model) with weights drawn from a generator seeded with
    `seed`. On the CPU they are drawn in float32 and cast, as they always were. On a GPU
    they are drawn there, in `dtype`, in moments, where a small CPU would take minutes for
    an 8B model's (docs/results/2026-12-04-h200-backend-check.md).
    The values then differ from the CPU's for the same seed; timing does not depend on them."""
    dev = torch.device(device)
    if dev.type == "cpu":
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            hf = make()
        return hf.to(device=dev, dtype=dtype).eval()
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    with torch.random.fork_rng(devices=[index], device_type=dev.type), torch.device(dev):
        torch.manual_seed(seed)
        hf = make(dtype=dtype)
    return hf.to(device=dev, dtype=dtype).eval()


def build_preset(name: str, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", seed: int = 0) -> LoadedModel:
    """The embedded model `name` with weights drawn from a seeded generator."""
    from transformers import AutoModelForCausalLM, LlamaForCausalLM  # lazy: transformers (seconds), as above
    if name not in MODELS or not name.startswith(PRESET_PREFIX):
        hint = (" (a simulator-only preset: its weights are not available here; pass "
                "--model DIR for a local checkpoint)" if name in MODELS else "")
        raise ValueError(f"unknown backend model {shown(name)}{hint}; expected one of "
                         f"{', '.join(preset_names())} or a checkpoint directory")
    shipped = PRESET_CONFIGS / f"{name}.json"
    config = shipped_config(shipped) if shipped.is_file() else preset_config(MODELS[name])
    config._attn_implementation = "sdpa"
    if hasattr(config, "_experts_implementation"):
        config._experts_implementation = "eager"  # the reference loop over experts
    def make(**kw):
        if shipped.is_file():
            return AutoModelForCausalLM.from_config(config, **kw)
        return LlamaForCausalLM._from_config(config, **kw) if kw else LlamaForCausalLM(config)
    hf = seeded_weights(make, seed, dtype, device)
    return LoadedModel(hf, name, "preset", spec_from_config(name, config, dtype), seed)


def load_checkpoint(path: str | os.PathLike, dtype: torch.dtype = torch.float32,
                    device: torch.device | str = "cpu", seed: int = 0) -> LoadedModel:
    """A local Hugging Face checkpoint directory (config.json + safetensors); one holding
    a config.json and no weights is built from it with seeded random weights."""
    from transformers import AutoConfig, AutoModelForCausalLM  # lazy: transformers (seconds), only to load a model
    from transformers.utils import logging as hf_logging  # lazy: as above
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise ValueError(f"model {str(path)!r} is a file; expected a preset "
                         f"({', '.join(preset_names())}) or a checkpoint directory "
                         f"(config.json + *.safetensors)")
    if not d.is_dir():
        raise ValueError(f"model directory {str(path)!r} does not exist")
    if not (d / "config.json").is_file():
        raise ValueError(f"{str(path)!r} has no config.json: not a Hugging Face checkpoint directory")
    try:
        raw = json.loads((d / "config.json").read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{d / 'config.json'}: unreadable ({shown(str(e), 80)})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{d / 'config.json'}: a JSON {type(raw).__name__}; expected an object")
    if raw.get("model_type") not in SUPPORTED_TYPES:  # before transformers sees an unknown type
        raise ValueError(f"unsupported architecture {raw.get('model_type')!r} "
                         f"({', '.join(raw.get('architectures') or [])}) in {path}; "
                         f"the backend runs {', '.join(SUPPORTED_TYPES)} checkpoints")
    check_shape(raw, d / "config.json", dtype, device)
    if not any(d.glob("*.safetensors")) and not any(d.glob("pytorch_model*.bin")):
        return build_from_config(d, dtype, device, seed)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub
    hf_logging.disable_progress_bar()  # a bar per load would clutter the command's output
    config = AutoConfig.from_pretrained(d, local_files_only=True)
    check_supported(config)
    try:
        hf = AutoModelForCausalLM.from_pretrained(d, dtype=dtype, local_files_only=True,
                                                  attn_implementation="sdpa")
    except Exception as e:  # noqa: BLE001: a corrupt file raises whatever its reader raises
        detail = str(e).strip().splitlines()[0] if str(e).strip() else "no detail"
        raise ValueError(f"{d}: cannot load the weights ({type(e).__name__}: {detail}); "
                         f"is a weights file corrupt or truncated?") from e
    hf = hf.to(device=device).eval()
    # The absolute path: a profile records it, and must name it from any folder.
    return LoadedModel(hf, str(d.resolve()), "checkpoint", spec_from_config(d.name, config, dtype))


def build_from_config(d: Path, dtype: torch.dtype, device: torch.device | str, seed: int) -> LoadedModel:
    """A directory's config.json with weights drawn from a seeded generator, as the embedded
    presets are built: timing does not depend on weight values (source "config")."""
    from transformers import AutoModelForCausalLM  # lazy: transformers (seconds), only to build a model
    config = shipped_config(d / "config.json")
    check_supported(config)
    config._attn_implementation = "sdpa"
    if hasattr(config, "_experts_implementation"):
        config._experts_implementation = "eager"
    hf = seeded_weights(lambda **kw: AutoModelForCausalLM.from_config(config, **kw), seed, dtype, device)
    return LoadedModel(hf, str(d.resolve()), "config", spec_from_config(d.name, config, dtype), seed)


def load_model(name_or_dir: str, dtype: torch.dtype = torch.float32,
               device: torch.device | str = "cpu", seed: int = 0) -> LoadedModel:
    """A preset name, or a directory (anything with a path separator or that exists)."""
    if name_or_dir in MODELS and not os.path.isdir(name_or_dir):
        return build_preset(name_or_dir, dtype, device, seed)
    if os.sep in name_or_dir or os.path.exists(name_or_dir) or name_or_dir.startswith("."):
        return load_checkpoint(name_or_dir, dtype, device, seed)
    return build_preset(name_or_dir, dtype, device, seed)  # raises: unknown name
