"""A run's speculative engine from its [speculative] settings (the driver and the server
call this, so both speculate alike)."""
from __future__ import annotations

from batchlab.backend.engine import Engine
from batchlab.backend.kv_cache import PagedKVCache
from batchlab.backend.model_runner import ModelRunner
from batchlab.backend.speculative.draft import truncated_runner
from batchlab.backend.speculative.emission import VerifiedEmission
from batchlab.backend.speculative.engine import SpeculativeEngine
from batchlab.backend.speculative.separate import DraftModelEngine
from batchlab.core.speculative.config import SpeculativeConfig


def check_backend_speculative(cfg: SpeculativeConfig, temperature: float) -> None:
    """What the backend runs of cfg: a draft model (a separate one, or the target's own
    first layers), greedy. ValueError, one line naming the field, otherwise."""
    if cfg.method != "draft_model":
        raise ValueError(f"speculative.method {cfg.method}: the backend drafts with a draft model "
                         f"(method draft_model, with draft_model NAME|DIR or draft_layers N of the "
                         f"target's own)")
    if temperature != 0:
        raise ValueError(f"speculative decoding on the backend verifies greedily: run.temperature "
                         f"(--temperature) must be 0, got {temperature:g}")


class _Served:
    """The server's (backend/server/engine_loop.py): what its loop reads of an engine besides,
    requests whose sampling failed and per-request generators, both empty: it serves greedy
    requests only, every token the target's argmax."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.failed: dict[int, str] = {}
        self.generators: dict = {}


class ServedSpeculativeEngine(_Served, SpeculativeEngine):
    pass


class ServedDraftModelEngine(_Served, DraftModelEngine):
    pass


def speculative_engine(base: Engine, cfg: SpeculativeConfig, served: bool = False,
                       draft: tuple[ModelRunner, PagedKVCache] | None = None) -> SpeculativeEngine:
    """`base`'s runner and cache, speculating as cfg says (checked by check_backend_speculative);
    served: the server's engine; draft: a separate draft's runner and pool (Runtime.draft_parts),
    required where cfg names a draft_model."""
    k = cfg.num_speculative_tokens
    if cfg.draft_model is not None:
        if draft is None:
            raise ValueError(f"speculative.draft_model {cfg.draft_model}: not loaded beside the "
                             f"model (Runtime.use_draft)")
        runner, pool = draft
        share = round(runner.weight_bytes_per_step / base.runner.weight_bytes_per_step, 6)
        emission = VerifiedEmission(k, cfg.method, share, draft_model=cfg.draft_model)
        kind = ServedDraftModelEngine if served else DraftModelEngine
        return kind(base.runner, base.cache, runner, pool, emission, prompt_seed=base.prompt_seed)
    runner = truncated_runner(base.runner, cfg.draft_layers or 1)
    share = round(runner.weight_bytes_per_step / base.runner.weight_bytes_per_step, 6)
    emission = VerifiedEmission(k, cfg.method, share)
    kind = ServedSpeculativeEngine if served else SpeculativeEngine
    return kind(base.runner, base.cache, runner, emission, prompt_seed=base.prompt_seed)
