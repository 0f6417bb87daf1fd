"""The draft's shape, in the target's terms, for pricing (core/cost/dispatch.py) and for
memory: a draft model as its own config gives it; an EAGLE-style head as one dense decoder
layer at the target's widths with the target's LM head (its embedding shared); MTP as the
target's own next-token-prediction layer(s), MoE or MLA as the target's layers are; a
self-speculative draft as the target's first layers (weights and KV shared with it)."""
from __future__ import annotations

from dataclasses import dataclass

from batchlab.core.model.config_json import read_config_file
from batchlab.core.model.presets import PRESET_CONFIGS, is_model_path
from batchlab.core.model.spec import ModelSpec
from batchlab.core.speculative.config import SpeculativeConfig

# Where a config.json declares its multi-token-prediction layers (DeepSeek-V3/R1 and GLM-4.5:
# num_nextn_predict_layers; Qwen3-Next: mtp_num_hidden_layers).
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")


def declared_mtp_layers(model: str) -> int:
    """The MTP layers `model` (a preset name or a config.json path) ships with (0: none)."""
    path = model if is_model_path(model) else PRESET_CONFIGS / f"{model}.json"
    try:
        raw, _ = read_config_file(path)
    except (OSError, ValueError):  # a preset defined in code (no config.json): no MTP layers
        return 0
    return max((int(raw.get(k) or 0) for k in MTP_KEYS), default=0)

_DENSE = {"num_experts": 0, "experts_per_token": 0, "expert_intermediate_size": 0,
          "shared_expert_intermediate_size": 0, "moe_layers": 0, "expert_weight_bytes": 0.0}


@dataclass(frozen=True)
class Draft:
    """What proposes the drafts: its shape, and the memory it adds beside the target."""
    shape: ModelSpec
    extra_weight_bytes: int  # weights beside the target's (0: shared)
    extra_kv_bytes_per_token: int  # KV beside the target's, per token (0: shared)
    words: str  # for the assumptions line


def draft_of(cfg: SpeculativeConfig, target: ModelSpec, draft_model: ModelSpec | None = None) -> Draft:
    """The draft of `target` that cfg describes (draft_model: the looked-up draft_model).
    ValueError, one line naming the field, where it cannot serve beside the target."""
    if cfg.method == "draft_model" and draft_model is not None:
        check_draft_model(draft_model, target)
        shape = draft_model.model_copy(update={"dtype_bytes": target.dtype_bytes,
                                               "kv_dtype_bytes": target.kv_dtype_bytes})
        return Draft(shape, shape.weight_bytes, shape.kv_bytes_per_token,
                     f"draft model {draft_model.name} ({shape.params / 1e9:.3g} B parameters)")
    layers = cfg.draft_layers or 1
    if cfg.method == "draft_model":  # the target's own first layers
        if layers >= target.num_layers:
            raise ValueError(f"speculative.draft_layers {layers}: a draft of the target's own "
                             f"layers must use fewer than its {target.num_layers}")
        shape = _layers_of(target, layers, f"{target.name} first {layers} layers")
        return Draft(shape, 0, 0, f"the target's first {layers} of {target.num_layers} layers "
                     f"(weights and KV shared)")
    if cfg.method == "eagle":
        shape = _layers_of(target.model_copy(update=_DENSE), layers, f"{target.name} EAGLE head")
        return Draft(shape, _own_bytes(shape), shape.kv_bytes_per_token,
                     f"an EAGLE-style head of {layers} dense layer(s) at the target's widths")
    shape = _layers_of(target, layers, f"{target.name} MTP")
    return Draft(shape, _own_bytes(shape), shape.kv_bytes_per_token,
                 f"{layers} MTP layer(s) of the target")


def check_draft_model(draft: ModelSpec, target: ModelSpec, name: str | None = None) -> None:
    """ValueError, one line naming the field, where a separate draft cannot propose for
    `target`: another vocabulary, or a shorter context (simulator and backend alike)."""
    name = name or draft.name
    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"speculative.draft_model {name}: vocabulary of {draft.vocab_size:,} "
                         f"tokens, the target {target.name}'s {target.vocab_size:,}; a draft must "
                         f"share the target's vocabulary")
    if (target.max_context or 0) > (draft.max_context or 0):
        raise ValueError(f"speculative.draft_model {name}: context of {draft.max_context} tokens, "
                         f"shorter than the target {target.name}'s {target.max_context}")


def _layers_of(model: ModelSpec, layers: int, name: str) -> ModelSpec:
    update: dict = {"name": name, "num_layers": layers,
                    "layer_windows": model.layer_windows[:layers] if model.layer_windows else ()}
    if model.moe_layers:
        update["moe_layers"] = min(model.moe_layers, layers)
    return model.model_copy(update=update)


def _own_bytes(head: ModelSpec) -> int:
    """Weights an EAGLE head or MTP module holds beside the target: its layers and its fc
    (2h -> h); the embedding and LM head are the target's."""
    shared = head._embed * (1 if head.tied_embeddings else 2)
    return int((head.params - shared + 2 * head.hidden_size ** 2) * head.dtype_bytes)
