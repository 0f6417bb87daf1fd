"""The torch backend's runtime for an experiment's [model] table (run, validate, serve).
torch loads here, when a command that serves asks for it, never on import."""
from __future__ import annotations

from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError


def load_runtime(cfg: ExperimentConfig):
    """The backend Runtime for cfg.model; a one-line error without torch, or for a
    checkpoint transformers cannot read."""
    choice = cfg.model.fast_choice().check(cfg.model.device)  # a bad choice fails before torch loads
    try:
        from batchlab.backend.runtime import Runtime  # lazy: torch, only when serving
    except ImportError as e:  # torch is an optional dependency
        raise UserError(f"the backend needs torch and transformers ({e}); "
                        "install batchlab[backend]") from None
    m = cfg.model
    try:
        rt = Runtime(m.name, dtype=m.dtype, device=m.device, threads=m.threads,
                     kv_memory=m.kv_memory, matmul=m.matmul, fast=choice.fast_path())
    except (OSError, RuntimeError) as e:  # a checkpoint transformers cannot read
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"cannot load model {m.name!r}: {first}") from None
    sp = cfg.speculative
    if sp.on and sp.draft_model is not None:  # loaded now: the KV pool is sized beside it
        try:
            rt.use_draft(sp.draft_model)
        except (OSError, RuntimeError) as e:  # a checkpoint transformers cannot read
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"speculative.draft_model {sp.draft_model}: cannot load it: {first}") from None
    return rt
