"""A run's speculative engine from its [speculative] settings (the driver and the server
call this, so both speculate alike)."""
from __future__ import annotations

from batchlab.backend.engine import Engine
from batchlab.backend.speculative.draft import truncated_runner
from batchlab.backend.speculative.emission import VerifiedEmission
from batchlab.backend.speculative.engine import SpeculativeEngine
from batchlab.core.speculative.config import SpeculativeConfig


def check_backend_speculative(cfg: SpeculativeConfig, temperature: float) -> None:
    """What the backend runs of cfg: a draft of the target's own first layers, greedy.
    ValueError, one line naming the field, otherwise."""
    if cfg.method != "draft_model" or cfg.draft_model is not None:
        raise ValueError(f"speculative.method {cfg.method}"
                         f"{' with draft_model ' + cfg.draft_model if cfg.draft_model else ''}: the "
                         f"backend drafts with the target's own first layers (method draft_model, "
                         f"draft_layers N)")
    if temperature != 0:
        raise ValueError(f"speculative decoding on the backend verifies greedily: run.temperature "
                         f"(--temperature) must be 0, got {temperature:g}")


class ServedSpeculativeEngine(SpeculativeEngine):
    """The server's (backend/server/engine_loop.py): what its loop reads of an engine besides,
    requests whose sampling failed and per-request generators, both empty: it serves greedy
    requests only, every token the target's argmax."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.failed: dict[int, str] = {}
        self.generators: dict = {}


def speculative_engine(base: Engine, cfg: SpeculativeConfig, served: bool = False) -> SpeculativeEngine:
    """`base`'s runner and cache, speculating as cfg says (checked by check_backend_speculative);
    served: the server's engine."""
    draft = truncated_runner(base.runner, cfg.draft_layers or 1)
    share = round(draft.weight_bytes_per_step / base.runner.weight_bytes_per_step, 6)
    emission = VerifiedEmission(cfg.num_speculative_tokens, cfg.method, share)
    kind = ServedSpeculativeEngine if served else SpeculativeEngine
    return kind(base.runner, base.cache, draft, emission, prompt_seed=base.prompt_seed)
