"""Speculative decoding's setup for the simulator: the draft (core/speculative/draft.py)
priced by the same setup as the target (roofline, GPU profile, or a calibration profile
scaled by the weights the draft reads), the acceptance model, the KV pool left beside the
draft, and the emission each run draws from with its seed."""
from __future__ import annotations

from dataclasses import dataclass

from batchlab.core.cost.dispatch import roofline
from batchlab.core.cost.form import CostModel, Slowed
from batchlab.core.cost.served.formats import weight_formats
from batchlab.core.cost.served.model import ServedGpuCost
from batchlab.core.model.layout import Layout
from batchlab.core.model.presets import lookup_model
from batchlab.core.model.spec import ModelSpec
from batchlab.core.speculative.acceptance import Acceptance, per_position, read_acceptance_file
from batchlab.core.speculative.config import SpeculativeConfig
from batchlab.core.speculative.draft import Draft, declared_mtp_layers, draft_of
from batchlab.core.speculative.draft_cost import DraftedCost
from batchlab.core.speculative.emission import SpeculativeEmission
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.setup.meta import SetupMeta
from batchlab.experiments.setup.served import as_served_draft


@dataclass(frozen=True)
class SpeculativeSetup:
    config: SpeculativeConfig
    acceptance: Acceptance
    draft: Draft

    def emission(self, seed: int) -> SpeculativeEmission:
        """A fresh emission for one run (its counts are that run's)."""
        return SpeculativeEmission(self.config.num_speculative_tokens, self.acceptance, seed,
                                   self.config.method)


def acceptance_of(sp: SpeculativeConfig) -> Acceptance:
    k = sp.num_speculative_tokens
    try:
        if sp.acceptance_file is not None:
            return read_acceptance_file(sp.acceptance_file, k)
        if sp.acceptance is not None:
            return per_position(list(sp.acceptance), k)
    except ValueError as e:
        raise UserError(f"speculative.acceptance_file: {e}" if sp.acceptance_file else str(e)) from None
    raise UserError("speculative.acceptance or speculative.acceptance_file (--acceptance, "
                    "--acceptance-file): the simulator needs the draft's acceptance")


def target_model(cfg: ExperimentConfig) -> ModelSpec:
    """The model the setup priced, in its served dtypes (a profile's own model)."""
    if cfg.profile.path:
        from batchlab.core.cost.profile import load_profile  # lazy: only with --profile, as profile_setup

        return load_profile(cfg.profile.path).model
    from batchlab.experiments.setup.dtypes import served_model  # beside the setups that import it

    return served_model(cfg, lookup_model(cfg.model.name))[0]


def speculative_setup(cfg: ExperimentConfig, cost: CostModel, blocks: int, meta: SetupMeta,
                      target: ModelSpec) -> tuple[CostModel, int, SpeculativeSetup]:
    """(the step price with the draft's passes, the KV blocks left beside the draft, the
    setup); UserError, one line naming the field, where the draft cannot serve."""
    sp = cfg.speculative
    acceptance = acceptance_of(sp)
    try:
        other = lookup_model(sp.draft_model) if sp.draft_model else None
    except ValueError as e:
        raise UserError(f"speculative.draft_model: {e}") from None
    if sp.method == "mtp":
        declared = declared_mtp_layers(cfg.model.name)
        if not declared:
            raise UserError(f"speculative.method mtp: model {cfg.model.name} declares no multi-token-"
                            f"prediction layers (num_nextn_predict_layers in its config.json); use eagle "
                            f"or draft_model")
        if (sp.draft_layers or 1) > declared:
            raise UserError(f"speculative.draft_layers {sp.draft_layers}: {cfg.model.name} has {declared} "
                            f"MTP layer(s)")
    try:
        draft = draft_of(sp, target, other)
        draft_cost = _draft_price(cfg, cost, meta, target, draft)
    except ValueError as e:
        raise UserError(str(e) if str(e).startswith("speculative.") else f"speculative: {e}") from None
    if not cfg.profile.path:
        blocks = _blocks_beside(cfg, blocks, target, draft)
    k = sp.num_speculative_tokens
    meta.speculation = (f"{sp.method}, k={k}: {draft.words}; {acceptance.source} (mean acceptance "
                        f"length {acceptance.mean_length:.2f}); the target verifies k+1 tokens a "
                        f"decode, the draft runs k passes a step priced for its shape"
                        f"{' as served (piecewise CUDA graphs)' if isinstance(draft_cost, ServedGpuCost) else ''}"
                        f", no step overhead")
    shares = sp.method == "draft_model" and sp.draft_model is None  # the target's own layers
    return DraftedCost(cost, draft_cost, k, shares), blocks, SpeculativeSetup(sp, acceptance, draft)


def _draft_price(cfg: ExperimentConfig, cost: CostModel, meta: SetupMeta, target: ModelSpec,
                 draft: Draft) -> CostModel:
    h = cfg.hardware
    if cfg.profile.path:  # a fitted profile prices its own model: scaled by the weights read
        return Slowed(cost, draft.shape.params_read_per_step / target.params_read_per_step)
    layout = Layout(tp=h.tensor_parallel, ep=h.expert_parallel if draft.shape.is_moe else 1,
                    dp_attention=h.data_parallel_attention)
    hw = h.spec()
    if meta.cost_model == "gpu profile":
        from batchlab.experiments.setup.gpu import gpu_profile_for  # the GPU setup's own lookup

        profile = gpu_profile_for(cfg)[0].with_values({"step_s": 0.0})
        kernels = profile.cost(draft.shape, layout, hw)
        if not isinstance(cost, ServedGpuCost):  # the target priced by the kernels' sum: so is its draft
            return kernels
        return as_served_draft(kernels, h.served_engine, hw, max(meta.max_num_seqs.values()), h.knobs,
                               1 + cfg.speculative.num_speculative_tokens, weight_formats(draft.shape))
    return roofline(draft.shape, hw, h.tensor_parallel, h.mem_efficiency, h.compute_efficiency,
                    0.0, h.allreduce_latency_s, layout=layout)


def _blocks_beside(cfg: ExperimentConfig, blocks: int, target: ModelSpec, draft: Draft) -> int:
    """The target's KV pool less the draft's weights, its blocks holding the draft's KV too."""
    if cfg.scheduler.num_kv_blocks:
        return blocks  # the pool the user gave, the draft's share of memory theirs to leave
    bs = cfg.scheduler.block_size
    per_block = target.kv_bytes_per_token * bs
    free = blocks * per_block - draft.extra_weight_bytes
    if free < per_block + draft.extra_kv_bytes_per_token * bs:
        sp = cfg.speculative
        field = f"speculative.draft_model {sp.draft_model}" if sp.draft_model else f"speculative.method {sp.method}"
        raise UserError(f"{field}: the draft ({draft.words}, {draft.extra_weight_bytes / 2**30:.2f} "
                        f"GiB of weights) does not fit beside {target.name} on "
                        f"{cfg.hardware.gpus} x {cfg.hardware.name}: the KV pool leaves "
                        f"{blocks * per_block / 2**30:.2f} GiB")
    return int(free // (per_block + draft.extra_kv_bytes_per_token * bs))
