"""The draft the backend runs: the target's own first layers, its final norm and LM head
(a self-speculative, early-exit draft in the manner of LayerSkip and Draft&Verify).

Why this draft: the backend's models carry seeded random weights, and an independent
small model with random weights would agree with a random target about as often as two
dice. A draft made of the target's first layers is a real draft (cheaper, and wrong
where the later layers change the argmax) whose agreement with the target is what it is,
measured, not arranged. It shares the target's weights and its KV cache: the KV of
layer i at a position depends only on the layers before it and the tokens up to there,
so the target's KV of the kept tokens is the draft's too, and the draft's writes at
draft positions are overwritten when the target verifies them."""
from __future__ import annotations

import copy

from batchlab.backend.model_runner import ModelRunner


def truncated_runner(runner: ModelRunner, layers: int) -> ModelRunner:
    """The target's first `layers` layers as a runner of their own (weights shared: a
    shallow copy whose layer list is cut). Its attention writes the target's cache
    layers 0..layers-1."""
    if not 1 <= layers < len(runner.layers):
        raise ValueError(f"speculative.draft_layers {layers}: a draft of the target's own layers "
                         f"uses 1 to {len(runner.layers) - 1} of its {len(runner.layers)}")
    draft = copy.copy(runner)
    draft.layers = runner.layers[:layers]
    return draft
