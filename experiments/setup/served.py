"""A GPU profile's price as a served engine runs its steps (core/cost/served/): the shipped
vLLM terms by default, a user's served profile, or none (the kernels' sum, as the
operator tables timed them)."""
from __future__ import annotations

from batchlab.core.cost.form import CostModel
from batchlab.core.cost.gpu_form import GpuCostModel
from batchlab.core.cost.served.allreduce import EngineAllReduce
from batchlab.core.cost.served.engine import VLLM
from batchlab.core.cost.served.formats import DEEP_GEMM_EXPERTS, MOE_COMPUTE_SHARE, RATES, Prior, WeightFormats
from batchlab.core.cost.served.host import HOST_OVERLAP
from batchlab.core.cost.served.model import ServedGpuCost
from batchlab.core.cost.knobs import Knob
from batchlab.core.cost.served.profile import ServedProfile, load_served_profile, shipped_served_profile
from batchlab.core.cost.served.terms import BOUNDS, PRIORS, ServedTerms
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


def as_served(cost: CostModel, choice: str, hw: HardwareSpec, max_num_seqs: int, meta: SetupMeta,
              knobs: dict[str, float] | None = None, decode_query_len: int = 1,
              formats: WeightFormats = WeightFormats()) -> CostModel:
    """`cost` (a GPU profile's) with the served-engine terms `choice` names on top; knobs:
    `served_<term>` values replacing the profile's (capacity --sensitivity); decode_query_len:
    1 + k where the deployment speculates (its capture sizes); formats: the model's GEMMs'
    weight formats (core/cost/served/formats.py)."""
    profile, where = served_profile_of(choice)
    if profile is None or not isinstance(cost, GpuCostModel):
        return cost
    terms = terms_with(profile, knobs or {})
    served = ServedGpuCost.build(cost, terms, VLLM, max_num_seqs, hw.name, hw.nvlink,
                                 decode_query_len=decode_query_len, formats=formats)
    held = [h for h in profile.heldout if h.by == "model"]
    judged = (f"; mean TPOT held out by model: median {', '.join(f'{h.left_out} {h.tpot_median_pct:.0f}%' for h in held)}"
              if held else "")
    if held and all(h.ttft_median_pct is not None for h in held):
        judged += f"; mean TTFT: {', '.join(f'{h.left_out} {h.ttft_median_pct:.0f}%' for h in held)}"
    ar = served.graph.allreduce
    if meta.gpu_profile_allreduce and isinstance(ar, EngineAllReduce) and (ar.custom_below or ar.symm_below):
        meta.gpu_profile_allreduce = (f"the engine's own below {_size(ar.custom_below)}"
                                      + (f", symmetric memory ({'multimem' if ar.multimem else 'two-shot'}) below "
                                         f"{_size(ar.symm_below)}" if ar.symm_below else "")
                                      + f", else {meta.gpu_profile_allreduce}")
    meta.served_engine = (f"{profile.engine} as served ({where}: CUDA graphs to {served.max_capture_tokens} "
                          f"tokens, its all-reduce by message size, fused elementwise kernels, its attention "
                          f"kernel, host time a step ({_host_words(profile, terms)})"
                          f"{_format_rates(profile, terms, formats, bool(cost.shapes.experts.experts))}; fitted on "
                          f"{profile.fitted_on}{judged})")
    return served


def _host_words(profile: ServedProfile, terms: ServedTerms) -> str:
    """Whether async scheduling hides the host time, and whose default that is (host.py)."""
    if terms.host_overlap == HOST_OVERLAP.prior and HOST_OVERLAP.term in profile.held:
        return f"not hidden: async scheduling {HOST_OVERLAP.source}"
    return f"{terms.host_overlap:.0%} of it hidden behind the GPU's step, up to its length: async scheduling"


def _held(profile: ServedProfile, prior: Prior) -> str:
    return (f"held at its prior, {prior.source}; --sensitivity {prior.low:g}-{prior.high:g}"
            if prior.term in profile.held else "fitted")


def _format_rates(profile: ServedProfile, terms: ServedTerms, formats: WeightFormats, moe: bool) -> str:
    """The rates of the model's GEMMs in formats other than bf16, and where each came from
    (nothing for a bf16 model: its GEMMs run at bf16_gemm_speedup, as before formats); a
    MoE model's routed experts at the fused-MoE kernel's share (formats.py)."""
    parts = []
    for f in formats.used:
        if f in RATES and (f != formats.experts or f == formats.dense or f in ("mxfp4", *DEEP_GEMM_EXPERTS)):
            r = RATES[f]
            what = "experts" if f == formats.experts and f != formats.dense else "GEMMs"
            parts.append(f"{f} {what} at {getattr(terms, r.term):.2f} x {r.base} ({_held(profile, r)})")
    if moe and formats.experts in DEEP_GEMM_EXPERTS:
        parts.append(f"routed experts in DeepGEMM's grouped GEMMs at the {formats.experts} GEMMs' rate")
    elif moe:
        parts.append(f"routed experts in the fused-MoE kernel at {terms.moe_compute_share:.2f} x the bf16 GEMMs' "
                     f"served rate ({_held(profile, MOE_COMPUTE_SHARE)})")
    return f", {'; '.join(parts)}" if parts else ""


def as_served_draft(draft: CostModel, choice: str, hw: HardwareSpec, max_num_seqs: int,
                    knobs: dict[str, float] | None = None, decode_query_len: int = 1,
                    formats: WeightFormats = WeightFormats()) -> CostModel:
    """A speculative draft's price (a GPU profile's, for its shape) as the engine serving the
    target runs its passes: piecewise CUDA graphs, the served terms, no host time of its own."""
    profile, _ = served_profile_of(choice)
    if profile is None or not isinstance(draft, GpuCostModel):
        return draft
    return ServedGpuCost.build(draft, terms_with(profile, knobs or {}), VLLM, max_num_seqs, hw.name,
                               hw.nvlink, drafting=True, decode_query_len=decode_query_len, formats=formats)


def _size(nbytes: float) -> str:
    return f"{nbytes / 2**20:g} MiB" if nbytes >= 2**20 else f"{nbytes / 1024:g} KiB"


KNOB_PREFIX = "served_"  # a served-engine term as a knob (capacity --sensitivity): served_<term>


def served_knobs(choice: str) -> list[Knob]:
    """The served-engine terms of `choice` as knobs: a term the benchmarks did not tell (at
    its bound) over its physical range; a term held at its prior (a format's rate no row ran,
    the host overlap) over its prior's range (terms.py PRIORS); a fitted one over the values its held-out
    folds (the fits without one model or TP degree) gave it."""
    profile, where = served_profile_of(choice)
    if profile is None:
        return []
    out = []
    for name, value in profile.terms.items():
        prior = PRIORS.get(name)
        if prior is not None and name in profile.held:
            lo, hi = prior.low, prior.high
            source = f"{where}: held at its prior ({prior.source})"
        elif name in profile.at_bound:
            lo, hi = BOUNDS[name]
            source = f"{where}: not told by the benchmarks (at its bound), its physical range"
        else:
            folds = [h.terms[name] for h in profile.heldout if name in h.terms]
            if not folds:
                continue
            lo, hi = min(folds + [value]), max(folds + [value])
            source = f"{where}: fitted; its range over {len(folds)} held-out folds"
        if lo != hi:
            out.append(Knob(KNOB_PREFIX + name, value, lo, hi, source))
    return out


def terms_with(profile: ServedProfile, values: dict[str, float]) -> ServedTerms:
    """The profile's terms with the `served_*` knobs among `values` applied."""
    terms = dict(profile.terms)
    for k, v in values.items():
        if k.startswith(KNOB_PREFIX):
            terms[k.removeprefix(KNOB_PREFIX)] = v
    try:
        return ServedTerms(**terms)
    except ValueError as e:
        raise UserError(f"[hardware] knobs: {e}") from None
