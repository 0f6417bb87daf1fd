"""A checkpoint's config.json numbers, checked before transformers reads them: a
boolean, a float or an absurd size in a shape field is one line naming the file and
the field, and weights that cannot fit are refused with the memory they would need."""
from __future__ import annotations

from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from batchlab.backend.device import free_memory_bytes
from batchlab.core.checks import Count, Tokens, shown
from batchlab.core.model.config_json import spec_from_config
from batchlab.core.sizes import gib


class CheckpointShape(BaseModel):
    """The fields of a Llama-family config.json that size the model."""
    model_config = ConfigDict(extra="ignore")
    num_hidden_layers: Count
    hidden_size: Count
    num_attention_heads: Count
    intermediate_size: Count
    vocab_size: Count
    num_key_value_heads: Count | None = None
    head_dim: Count | None = None
    max_position_embeddings: Tokens | None = None
    tie_word_embeddings: bool = False


def check_shape(raw: dict, where: Path, dtype: torch.dtype, device: torch.device | str) -> None:
    """ValueError (one line) for a shape field that is not a sensible count, or weights
    larger than the device's free memory."""
    try:
        CheckpointShape.model_validate(raw, strict=True)  # the fields, as strict counts
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        got = "" if first["type"] == "missing" else f" (got {shown(first.get('input'))})"
        raise ValueError(f"{where}: {loc}: {first['msg'].removeprefix('Value error, ')}{got}") from None
    # Every expert of a MoE counts (core/model/config_json.py reads the experts; the Llama
    # fields above would count one).
    params = spec_from_config(raw, where.parent.name, str(where)).params
    need = params * torch.empty(0, dtype=dtype).element_size()
    free = free_memory_bytes(torch.device(device))
    if need > free:
        raise ValueError(f"{where}: a model of {params:,} parameters would need "
                         f"{gib(need)} for its weights; {device} has {gib(free)} free")
