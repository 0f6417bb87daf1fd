"""The GPU-profile setup: a GPU preset priced by the GPU cost form with constants fitted on
measured operators (core/cost/gpu_profile.py): the preset's shipped profile, or the nearest
measured GPU's scaled by datasheet ratios. The roofline setup stays for `--cost roofline`,
for a roofline constant the user gives, and where no profile is shipped.

Mixtures of experts, latent attention, sliding windows and PP/EP/DP-attention layouts are
priced by the same profile (core/cost/gpu_deployment.py); their KV capacity is the
deployment's (core/cost/deployment.py deployment_kv_blocks: the hybrid allocator's rule)."""
from __future__ import annotations

from batchlab.core.cost.dispatch import is_plain, step_allreduces
from batchlab.core.cost.form import CostModel
from batchlab.core.cost.deployment import model_terms
from batchlab.core.cost.gpu_profile import Collectives
from batchlab.core.model.layout import Layout
from batchlab.core.model.spec import ModelSpec
from batchlab.core.cost.gpu_profile import GpuProfile, GpuProfileError, load_gpu_profile, scaled_to, shipped_gpu_profiles
from batchlab.core.cost.knobs import Knob
from batchlab.core.model.hardware import HARDWARE, HardwareSpec
from batchlab.core.model.presets import lookup_model
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.setup.dtypes import served_model
from batchlab.experiments.setup.meta import SetupMeta
from batchlab.experiments.setup.served import KNOB_PREFIX, served_knobs
from batchlab.experiments.setup.roofline import kv_blocks

# Giving one of these asks for the roofline (cost = auto).
ROOFLINE_FIELDS = ("mem_efficiency", "compute_efficiency", "step_overhead_s", "allreduce_latency_s")
# A preset without operator tables is priced from the measured GPU most like it: the same
# architecture and interconnect where there is one (H200: an H100 with more, faster memory),
# else the same market (L4, a PCIe inference card: the A40).
NEAREST = {"h200": "h100-sxm", "l4": "a40"}


def wants_roofline(cfg: ExperimentConfig) -> bool:
    return roofline_because(cfg) is not None


def roofline_because(cfg: ExperimentConfig) -> str | None:
    """Why cfg's GPU preset is priced by the roofline rather than a GPU profile (None: it
    is not), in words for the assumption lines."""
    h = cfg.hardware
    if h.cost == "auto" and h.gpu_profile is None:
        given = [f for f in ROOFLINE_FIELDS if f in h.model_fields_set]
        if given:
            return f"{', '.join(given)} given, {'a roofline constant' if len(given) == 1 else 'roofline constants'}"
        return None if shipped_gpu_profiles() else "no GPU profile is shipped with this install"
    return "asked for with cost = roofline" if h.cost == "roofline" else None


def _nearest(hw: HardwareSpec, shipped: list[str]) -> str:
    if NEAREST.get(hw.name) in shipped:
        return NEAREST[hw.name]
    return min(shipped, key=lambda g: abs(HARDWARE[g].mem_bandwidth / hw.mem_bandwidth - 1))


def gpu_profile_for(cfg: ExperimentConfig) -> tuple[GpuProfile, str]:
    """(the profile that prices cfg's preset, where it came from)."""
    hw = cfg.hardware.spec()
    given = cfg.hardware.gpu_profile
    try:
        if given:
            p = load_gpu_profile(given)
            if p.gpu != hw.name:
                raise UserError(f"GPU profile {given} (--gpu-profile) prices {p.gpu}, not {hw.name} "
                                f"(--hardware): give the profile of that GPU")
            return p, given
        shipped = [g for g in shipped_gpu_profiles() if g in HARDWARE]
        if hw.name in shipped:
            return load_gpu_profile(hw.name), f"shipped {hw.name}"
        if not shipped:
            raise UserError("no GPU profile is shipped with this install: use --cost roofline")
        near = _nearest(hw, shipped)
        return scaled_to(load_gpu_profile(near), HARDWARE[near], hw), f"shipped {near}, scaled to {hw.name}"
    except GpuProfileError as e:
        raise UserError(str(e)) from None


def gpu_setup(cfg: ExperimentConfig, knob_values: dict[str, float] | None = None
              ) -> tuple[CostModel, int, SetupMeta]:
    """The GPU form's cost model and KV capacity for cfg's model preset on its GPU preset;
    knob_values replace profile constants by name (sensitivity: GpuProfile.knobs)."""
    profile, where = gpu_profile_for(cfg)
    h = cfg.hardware
    own = {k: v for k, v in (knob_values or {}).items() if not k.startswith(KNOB_PREFIX)}  # served_*: served.py's
    if own:
        try:
            profile = profile.with_values(own)
        except ValueError as e:
            raise UserError(f"[hardware] knobs: {e}") from None
    try:
        hw = h.spec()
        model, weights, kv = served_model(cfg, lookup_model(cfg.model.name))
        layout = h.layout()
        cost = profile.cost(model, layout, hw)
    except ValueError as e:
        raise UserError(str(e)) from None
    blocks = kv_blocks(cfg, model, hw)
    held = profile.heldout
    regions = ", ".join(f"{r} {s.median:.1%}" for r, s in held.by_region.items())
    p = profile.params
    meta = SetupMeta(model=model.name, hardware=hw.name, tensor_parallel=h.tensor_parallel,
                     cost_model="gpu profile", max_context=model.max_context,
                     mem_efficiency=round(p["mem_efficiency"].value, 4),
                     compute_efficiency=round(p["compute_efficiency"].value, 4),
                     step_overhead_s=p["step_s"].value, gpu_memory_utilization=h.gpu_memory_utilization,
                     weights_dtype=weights, kv_cache_dtype=kv,
                     allreduces_per_step=step_allreduces(model, layout),
                     interconnect=hw.interconnect, interconnect_bandwidth=hw.interconnect_bandwidth,
                     gpu_profile=where, gpu_profile_source=profile.source,
                     gpu_profile_heldout=f"median {held.overall.median:.1%}, p90 {held.overall.p90:.1%} "
                     f"({regions})" if held.overall.n else f"none ({held.scheme})",
                     gpu_profile_heldout_median=held.overall.median if held.overall.n else None,
                     gpu_profile_scaled_from=profile.scaled_from.gpu if profile.scaled_from else None,
                     knobs=dict(knob_values) if knob_values else None)
    if profile.scaled_from and profile.scaled_from.interval_text():  # set here only: own profiles' meta unchanged
        meta.gpu_profile_scaled_interval = profile.scaled_from.interval_text()
    if h.tensor_parallel > 1:
        c = profile.collectives
        meta.gpu_profile_allreduce = (f"NCCL all-reduce measured on {h.tensor_parallel} GPUs ({c.interconnect})"
                                      if h.tensor_parallel in c.allreduce else c.fallback)
    if not layout.is_plain_tp:
        meta.pipeline_parallel, meta.expert_parallel = layout.pp, layout.ep
        meta.data_parallel_attention = layout.dp_attention
    if not is_plain(model, layout):
        meta.deployment = gpu_form_terms(model, layout, profile.collectives)
    return cost, blocks, meta


def gpu_form_terms(model: ModelSpec, layout: Layout, c: Collectives) -> str:
    """What the GPU form priced beyond a dense layer at TP, in words (the assumptions)."""
    parts = [f"beyond a dense layer at TP (priced with the fitted constants; the held-out error "
             f"above is dense layers'): {'; '.join(model_terms(model)) or 'a dense model'}"]
    if model.is_moe:
        parts.append("routed experts as two grouped GEMMs (gate_up, down) over the touched experts' "
                     "weights and the routed rows, on the dense GEMMs' fitted ridge")
    if layout.ep > 1:
        where = (f"the NCCL all-reduce table on {layout.ep} GPUs ({c.interconnect})"
                 if layout.ep in c.allreduce else c.fallback)
        parts.append(f"EP {layout.ep}: dispatch and combine per MoE layer, each an all-to-all priced as "
                     f"an all-reduce moving the same bytes per GPU ({where}; no all-to-all measured)")
    if layout.pp > 1:
        parts.append(f"PP {layout.pp}: a pipeline round of min(stages, sequences) micro-batches, "
                     f"{layout.pp - 1} send/recv hops at the profile's collective latency and bandwidth")
    if layout.dp_attention:
        parts.append(f"DP attention: whole attention weights, each GPU its 1/{layout.tp} of the sequences")
    return "; ".join(parts)


def gpu_knobs(cfg: ExperimentConfig) -> list[Knob]:
    """The constants cfg's GPU price rests on, with their ranges (capacity --sensitivity):
    the GPU profile's, then the served engine's terms on top (experiments/setup/served.py)."""
    served = served_knobs(cfg.hardware.served_engine)
    # a served engine's own host time replaces the profile's assumed step_s and seq_s (terms.py)
    own = [k for k in gpu_profile_for(cfg)[0].knobs() if not (served and k.name in ("step_s", "seq_s"))]
    return own + served
