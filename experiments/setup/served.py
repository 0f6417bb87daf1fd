"""A GPU profile's price as a served engine runs its steps (core/cost/served/): the shipped
vLLM terms by default, a user's served profile, or none (the kernels' sum, as the
operator tables timed them)."""
from __future__ import annotations

from batchlab.core.cost.form import CostModel
from batchlab.core.cost.gpu_form import GpuCostModel
from batchlab.core.cost.served.engine import VLLM
from batchlab.core.cost.served.model import EngineAllReduce, ServedGpuCost
from batchlab.core.cost.served.profile import ServedProfile, load_served_profile, shipped_served_profile
from batchlab.core.model.hardware import HardwareSpec
from batchlab.experiments.errors import UserError
from batchlab.experiments.setup.meta import SetupMeta


def served_profile_of(choice: str) -> tuple[ServedProfile | None, str]:
    """(the profile `choice` names, where it came from); (None, "") for none."""
    if choice == "none":
        return None, ""
    path = shipped_served_profile() if choice == "vllm" else choice
    try:
        return load_served_profile(path), "shipped vLLM terms" if choice == "vllm" else str(path)
    except ValueError as e:
        raise UserError(f"[hardware] served_engine: {e}") from None


def as_served(cost: CostModel, choice: str, hw: HardwareSpec, max_num_seqs: int, meta: SetupMeta) -> CostModel:
    """`cost` (a GPU profile's) with the served-engine terms `choice` names on top."""
    profile, where = served_profile_of(choice)
    if profile is None or not isinstance(cost, GpuCostModel):
        return cost
    nvlink = "nvlink" in (hw.interconnect or "").lower()
    served = ServedGpuCost.build(cost, profile.served_terms(), VLLM, max_num_seqs, hw.name, nvlink)
    held = {h.left_out: h.tpot_median_pct for h in profile.heldout if h.by == "model"}
    judged = (f"; mean TPOT held out by model: median {', '.join(f'{m} {v:.0f}%' for m, v in held.items())}"
              if held else "")
    ar = served.graph.allreduce
    if meta.gpu_profile_allreduce and isinstance(ar, EngineAllReduce) and (ar.custom_below or ar.symm_below):
        meta.gpu_profile_allreduce = (f"the engine's own below {_size(ar.custom_below)}"
                                      + (f", symmetric memory ({'multimem' if ar.multimem else 'two-shot'}) below "
                                         f"{_size(ar.symm_below)}" if ar.symm_below else "")
                                      + f", else {meta.gpu_profile_allreduce}")
    meta.served_engine = (f"{profile.engine} as served ({where}: CUDA graphs to {served.max_capture_tokens} "
                          f"tokens, its all-reduce by message size, fused elementwise kernels, its attention "
                          f"kernel, host time a step; fitted on {profile.fitted_on}{judged})")
    return served


def _size(nbytes: float) -> str:
    return f"{nbytes / 2**20:g} MiB" if nbytes >= 2**20 else f"{nbytes / 1024:g} KiB"
