"""Any Hugging Face config.json -> ModelSpec: dense (Llama, Mistral, Qwen2/2.5/3,
Gemma 2/3), mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE, gpt-oss, DeepSeek-V2/V3,
Llama 4), latent attention (MLA), sliding-window and alternating local/global attention,
attention sinks, tied embeddings and declared fp8 / mxfp4 weights.

A config batchlab cannot price is a ValueError of one line naming the file and the
field: an unknown architecture, a missing or contradictory field (experts per token
above the expert count, heads that do not divide), a quantisation it does not price.
Which family reads which fields follows transformers' config classes (their defaults
for a field the file leaves out)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from batchlab.core import text_input
from batchlab.core.checks import MAX_TOKENS, shown
from batchlab.core.model.spec import (MAX_EXPERTS, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH, ModelSpec,
                                      MXFP4_BYTES)

DENSE = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text")
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", "deepseek_v2", "deepseek_v3", "llama4_text")
# Multimodal wrappers whose language model sits under text_config.
WRAPPERS = {"gemma3": "gemma3_text", "llama4": "llama4_text", "mistral3": "mistral"}
ARCHITECTURES = DENSE + MOE
GEMMA = ("gemma", "gemma2", "gemma3_text")
# Layer kinds of a config's layer_types, and which field sizes their window.
WINDOW_KINDS = {"full_attention": None, "sliding_attention": "sliding_window",
                "chunked_attention": "attention_chunk_size"}


# The most each field may hold (core/model/spec.py says why), checked as it is read: before
# per-layer tables are built from it. A field not named here: at most MAX_TOKENS.
_LAYERS = ("num_hidden_layers", "max_window_layers", "first_k_dense_replace", "decoder_sparse_step",
           "moe_layer_freq", "interleave_moe_layer_step", "no_rope_layer_interval",
           "sliding_window_pattern", "_sliding_window_pattern")
_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
            "experts_per_token", "n_shared_experts")
_WIDTHS = ("hidden_size", "head_dim", "intermediate_size", "intermediate_size_mlp", "moe_intermediate_size",
           "shared_expert_intermediate_size", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
           "qk_nope_head_dim", "v_head_dim")
MOST = {**{k: MAX_LAYERS for k in _LAYERS}, **{k: MAX_EXPERTS for k in _EXPERTS},
        **{k: MAX_WIDTH for k in _WIDTHS}, "vocab_size": MAX_VOCAB,
        "num_attention_heads": MAX_HEADS, "num_key_value_heads": MAX_HEADS}


class _Fields:
    """A config's fields, read with one-line errors naming the file and the field."""

    def __init__(self, raw: dict[str, Any], where: str) -> None:
        self.raw, self.where = raw, where

    def fail(self, field: str, what: str) -> ValueError:
        return ValueError(f"{self.where}: {field}: {what}")

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def count(self, key: str, default: int | None = None, *, zero: bool = False) -> int:
        v = self.raw.get(key)
        if v is None:
            if default is None:
                raise self.fail(key, "missing; the model cannot be priced without it")
            return default
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if zero else 1):
            raise self.fail(key, f"expected a {'non-negative' if zero else 'positive'} integer "
                                 f"(got {shown(v)})")
        most = MOST.get(key, MAX_TOKENS)
        if v > most:
            raise self.fail(key, f"{v:,} is beyond what batchlab simulates (at most {most:,}; "
                                 f"core/model/spec.py says why)")
        return v

    def first(self, keys: tuple[str, ...], default: int | None = None, *, zero: bool = False) -> int:
        """The first of `keys` the config sets (families spell one field differently)."""
        for k in keys:
            if self.has(k):
                return self.count(k, zero=zero)
        if default is None:
            raise self.fail(keys[0], "missing; the model cannot be priced without it")
        return default

    def flag(self, key: str, default: bool) -> bool:
        v = self.raw.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.fail(key, f"expected true or false (got {shown(v)})")
        return v


def read_config_file(path: str | Path) -> tuple[dict[str, Any], Path]:
    """The JSON object of a config.json, given the file or the directory holding it."""
    p = Path(path)
    f = p / "config.json" if p.is_dir() else p
    if p.is_dir() and not f.is_file():
        raise ValueError(f"{p}: no config.json in this directory (a model is a preset name, "
                         f"a directory holding a Hugging Face config.json, or that file)")
    if not f.is_file():
        hub = "" if p.is_absolute() or str(path).startswith(".") or str(path).count("/") != 1 else (
            " (batchlab reads a local config.json and never the model hub: download the "
            "repository's config.json and give its folder)")
        raise ValueError(f"{p}: no such file or directory{hub}")
    try:
        raw = text_input.loads(text_input.read_text(f))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, text_input.DuplicateKey) as e:
        raise ValueError(f"{f}: not a readable JSON config ({shown(str(e), 80)})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{f}: a JSON {type(raw).__name__}; expected a config.json object")
    return raw, f


def spec_from_file(path: str | Path, name: str | None = None) -> ModelSpec:
    """The ModelSpec of a config.json (the file or its directory), named `name` or after
    the directory."""
    raw, f = read_config_file(path)
    return spec_from_config(raw, name or (f.parent.name if f.name == "config.json" else f.stem), str(f))


def spec_from_config(raw: dict[str, Any], name: str, where: str = "config.json") -> ModelSpec:
    mtype = raw.get("model_type")
    if mtype in WRAPPERS:
        text = raw.get("text_config")
        if not isinstance(text, dict):
            raise ValueError(f"{where}: text_config: missing; a {mtype} config holds its language "
                             f"model there")
        quant = raw.get("quantization_config")
        raw = {"model_type": WRAPPERS[mtype], **text}
        if quant is not None and "quantization_config" not in raw:
            raw["quantization_config"] = quant
        mtype = raw["model_type"]
    if mtype not in ARCHITECTURES:
        archs = ", ".join(a for a in raw.get("architectures") or [] if isinstance(a, str))
        raise ValueError(f"{where}: model_type: {shown(mtype)}{f' ({archs})' if archs else ''} is not "
                         f"an architecture batchlab prices; expected one of "
                         f"{', '.join(ARCHITECTURES + tuple(WRAPPERS))}")
    c = _Fields(raw, where)
    fields = _dense(c, mtype)
    fields.update(_windows(c, mtype, fields["num_layers"]))
    if mtype in MOE:
        fields.update(_experts(c, mtype, fields["num_layers"]))
    if mtype.startswith("deepseek"):
        fields.update(_mla(c, fields))
    fields.update(_quantization(c))
    try:
        return ModelSpec(name=name, architecture=mtype, **fields)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "config"
        raise ValueError(f"{where}: {loc}: {err['msg'].removeprefix('Value error, ')}") from None


def _dense(c: _Fields, mtype: str) -> dict[str, Any]:
    L, h = c.count("num_hidden_layers"), c.count("hidden_size")
    nh = c.count("num_attention_heads")
    nkv = c.count("num_key_value_heads", nh)
    if nh % nkv:
        raise c.fail("num_key_value_heads", f"{nkv} does not divide num_attention_heads {nh}")
    if c.has("head_dim"):
        hd = c.count("head_dim")
    elif h % nh:
        raise c.fail("num_attention_heads", f"{nh} does not divide hidden_size {h} (and no head_dim)")
    else:
        hd = h // nh
    dense_width = "intermediate_size_mlp" if mtype == "llama4_text" else "intermediate_size"
    return {
        "num_layers": L, "hidden_size": h, "num_heads": nh, "num_kv_heads": nkv, "head_dim": hd,
        "intermediate_size": c.count(dense_width), "vocab_size": c.count("vocab_size"),
        "max_context": c.count("max_position_embeddings", 0) or None,
        # Gemma ties its LM head to the embedding unless told otherwise (transformers' default).
        "tied_embeddings": c.flag("tie_word_embeddings", mtype in GEMMA),
        "attention_sinks": mtype == "gpt_oss"}


def _layer_kinds(c: _Fields, mtype: str, L: int) -> list[str]:
    """Each layer's attention kind, from layer_types or the family's own pattern."""
    kinds = c.raw.get("layer_types")
    if kinds is not None:
        if not isinstance(kinds, list) or len(kinds) != L or any(k not in WINDOW_KINDS for k in kinds):
            raise c.fail("layer_types", f"expected {L} entries (num_hidden_layers), each one of "
                                        f"{', '.join(WINDOW_KINDS)}")
        return kinds
    full, local = "full_attention", "sliding_attention"
    if mtype in ("mistral", "mixtral"):  # one window for every layer, when set
        return [local if c.has("sliding_window") else full] * L
    if mtype in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        # transformers: layers from max_window_layers on slide, if use_sliding_window.
        if not (c.flag("use_sliding_window", False) and c.raw.get("sliding_window")):
            return [full] * L
        first = c.count("max_window_layers", L, zero=True)
        return [local if i >= first else full for i in range(L)]
    if mtype in ("gemma2", "gpt_oss"):  # local and global alternate, local first
        return [local if i % 2 == 0 else full for i in range(L)]
    if mtype == "gemma3_text":  # every sliding_window_pattern-th layer is global
        n = c.first(("sliding_window_pattern", "_sliding_window_pattern"), 6)
        return [full if (i + 1) % n == 0 else local for i in range(L)]
    if mtype == "llama4_text" and c.has("attention_chunk_size"):  # every 4th layer global
        n = c.count("no_rope_layer_interval", 4)
        return [full if (i + 1) % n == 0 else "chunked_attention" for i in range(L)]
    return [full] * L


def _windows(c: _Fields, mtype: str, L: int) -> dict[str, Any]:
    kinds = _layer_kinds(c, mtype, L)
    if all(k == "full_attention" for k in kinds):
        return {}
    windows = []
    for kind in kinds:
        key = WINDOW_KINDS[kind]
        # A chunked layer attends within its chunk: at most attention_chunk_size tokens,
        # priced as a window of that size (an upper bound: on average half of it).
        windows.append(c.count(key) if key else 0)
    return {"layer_windows": tuple(windows)}


def _experts(c: _Fields, mtype: str, L: int) -> dict[str, Any]:
    E = c.first(("num_local_experts", "num_experts", "n_routed_experts"))
    k = c.first(("num_experts_per_tok", "experts_per_token"))
    if k > E:
        raise c.fail("num_experts_per_tok", f"{k} exceeds the {E} experts")
    shared = 0
    if mtype in ("mixtral", "gpt_oss"):
        width, moe = c.count("intermediate_size"), list(range(L))
    elif mtype in ("qwen2_moe", "qwen3_moe"):
        width, step = c.count("moe_intermediate_size"), c.count("decoder_sparse_step", 1)
        dense_only = c.raw.get("mlp_only_layers") or []
        if not isinstance(dense_only, list):
            raise c.fail("mlp_only_layers", f"expected a list of layer indices (got {shown(dense_only)})")
        moe = [i for i in range(L) if i not in dense_only and (i + 1) % step == 0]
        shared = c.count("shared_expert_intermediate_size", 0, zero=True)
    elif mtype == "llama4_text":  # one shared expert as wide as a routed one
        width = shared = c.count("intermediate_size")
        step = c.count("interleave_moe_layer_step", 1)
        moe = list(range(step - 1, L, step))
    else:  # deepseek_v2 / v3: the first first_k_dense_replace layers are dense
        width = c.count("moe_intermediate_size")
        shared = c.count("n_shared_experts", 0, zero=True) * width
        first, freq = c.count("first_k_dense_replace", 0, zero=True), c.count("moe_layer_freq", 1)
        moe = [i for i in range(first, L) if i % freq == 0]
    if not moe:
        raise c.fail("num_hidden_layers", "no layer has experts under this config's layer pattern")
    return {"num_experts": E, "experts_per_token": k, "expert_intermediate_size": width,
                "shared_expert_intermediate_size": shared, "moe_layers": len(moe)}


def _mla(c: _Fields, fields: dict[str, Any]) -> dict[str, Any]:
    """DeepSeek's latent attention: the query/key head is nope + rope wide."""
    rank = c.count("kv_lora_rank")
    rope, nope = c.count("qk_rope_head_dim"), c.count("qk_nope_head_dim")
    fields.update(head_dim=nope + rope, num_kv_heads=fields["num_heads"])
    return {"kv_lora_rank": rank, "q_lora_rank": c.count("q_lora_rank", 0, zero=True),
                "qk_rope_head_dim": rope, "v_head_dim": c.count("v_head_dim")}


def _quantization(c: _Fields) -> dict[str, Any]:
    """fp8 (DeepSeek-V3's block-scaled e4m3): every linear weight is one byte, the KV
    cache stays 16-bit. mxfp4 (gpt-oss): the routed experts only; attention, router,
    embedding and head stay 16-bit (its modules_to_not_convert)."""
    q = c.raw.get("quantization_config")
    if q is None:
        return {}
    if not isinstance(q, dict):
        raise c.fail("quantization_config", f"expected an object (got {shown(q)})")
    method = q.get("quant_method")
    if method == "fp8":
        return {"quantization": "fp8", "dtype_bytes": 1, "kv_dtype_bytes": 2}
    if method == "mxfp4":
        if not c.has("num_local_experts") and not c.has("num_experts"):
            raise c.fail("quantization_config.quant_method", "mxfp4 on a model without experts: "
                                                             "batchlab prices mxfp4 experts only")
        return {"quantization": "mxfp4", "expert_weight_bytes": MXFP4_BYTES}
    raise c.fail("quantization_config.quant_method", f"{shown(method)}: batchlab prices fp8 and "
                                                     f"mxfp4 weights (or unquantised 16-bit ones)")
