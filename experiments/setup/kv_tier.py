"""A KV tier's size in the simulator's terms: the KV bytes one token takes on one GPU
(each GPU moves its share over its own host link; a speculative draft's own KV goes
with it) and the tier's blocks, checked before anything runs."""
from __future__ import annotations

from batchlab.core.model.presets import lookup_model
from batchlab.core.speculative.draft import Draft
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.setup.dtypes import served_model
from batchlab.experiments.setup.speculative import target_model


def kv_bytes_per_token_per_gpu(cfg: ExperimentConfig) -> float:
    if cfg.profile.path:
        from batchlab.core.cost.profile import load_profile  # lazy: only with --profile
        return float(load_profile(cfg.profile.path).model.kv_bytes_per_token)
    try:
        model, _, _ = served_model(cfg, lookup_model(cfg.model.name))
        share = cfg.hardware.layout().share(model)
    except ValueError as e:
        raise UserError(str(e)) from None
    per_layer = model.kv_bytes_per_token_layer * share.kv_per_token
    return float(share.stage * (model.full_layers + model.windowed_layers) * per_layer)


def checked_tier(cfg: ExperimentConfig, draft: Draft | None = None) -> float:
    """The KV bytes per token per GPU for cfg's tier, the draft's KV beside the target's
    (a pool block holds both: experiments/setup/speculative.py) sharded as the target's;
    UserError (naming the field) where the tier holds no block."""
    assert cfg.kv_tier is not None
    bpt = kv_bytes_per_token_per_gpu(cfg)
    if draft is not None and draft.extra_kv_bytes_per_token:
        bpt *= 1 + draft.extra_kv_bytes_per_token / target_model(cfg).kv_bytes_per_token
    try:
        cfg.kv_tier.capacity_blocks(bpt, cfg.scheduler.block_size)
    except ValueError as e:
        raise UserError(str(e)) from None
    return bpt

