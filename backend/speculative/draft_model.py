"""A separate draft model for the backend (speculative.draft_model): a preset or a
config.json directory with seeded random weights, or a local checkpoint, loaded as
backend/models.py loads any model, in the target's dtype on its device. Refused, one line
naming the field, before its weights load where it cannot draft for the target: another
vocabulary, a shorter context, or weights that do not fit in what the device has free."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from batchlab.backend.device import free_memory_bytes
from batchlab.backend.model_runner import ModelRunner
from batchlab.backend.models import LoadedModel, load_model
from batchlab.core.model.presets import lookup_model
from batchlab.core.model.spec import ModelSpec
from batchlab.core.sizes import gib
from batchlab.core.speculative.draft import check_draft_model


@dataclass
class LoadedDraft:
    name: str  # as the user gave it
    model: LoadedModel
    runner: ModelRunner

    @property
    def spec(self) -> ModelSpec:
        return self.model.spec


def load_draft(name: str, target: LoadedModel, dtype: torch.dtype, device: torch.device,
               seed: int, matmul: str = "auto") -> LoadedDraft:
    """The draft `name` beside `target`; ValueError (one line naming speculative.draft_model)
    where it cannot serve beside it."""
    try:
        shape = lookup_model(name)
    except ValueError as e:
        raise ValueError(f"speculative.draft_model: {e}") from None
    check_draft_model(shape, target.spec, name)
    need = shape.params * torch.empty(0, dtype=dtype).element_size()
    free = free_memory_bytes(device)
    if need > free:
        raise ValueError(f"speculative.draft_model {name}: its {shape.params:,} parameters need "
                         f"{gib(need)} beside the target {target.name}; {device} has {gib(free)} free")
    try:
        model = load_model(name, dtype, device, seed)
    except ValueError as e:
        raise ValueError(f"speculative.draft_model: {e}") from None
    check_draft_model(model.spec, target.spec, name)  # as loaded (a checkpoint's own config)
    runner = ModelRunner(model.hf, matmul)  # the reference path: one draft pass a token
    model.hf = None  # frees the unfused copies, as the runtime does for the target
    return LoadedDraft(name, model, runner)
