"""The profile setup: what `simulate --profile` simulates, from a calibration profile
(its fitted cost model, its KV capacity, its model and device)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from batchlab.core.model.presets import MODELS
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError, warn
from batchlab.experiments.setup.meta import SetupMeta

if TYPE_CHECKING:
    from batchlab.core.cost.form import CostModel


def _same_model(name: str, profile) -> bool:
    """Whether --model NAME|DIR names the profile's model (its name, its checkpoint
    directory, or a preset of the same shape)."""
    source = profile.model_source or profile.model.name
    if name in (profile.model.name, source) or Path(name).resolve() == Path(source).resolve():
        return True
    shape = profile.model.model_dump(exclude={"name"})
    return name in MODELS and MODELS[name].model_dump(exclude={"name"}) == shape


def profile_setup(cfg: ExperimentConfig, model_named: bool = False,
                  hardware_named: bool = False) -> tuple[CostModel, int, SetupMeta]:
    """simulate's (cost model, KV blocks, meta) from cfg.profile.path: the profile's
    fitted cost model, its KV capacity (in tokens, re-cut into cfg's block size unless
    --num-kv-blocks is given) and its model. A model or hardware the user named
    (model_named, hardware_named: by flag or config file) or a tensor parallelism that
    contradicts the profile is an error; cfg is updated to the model and device the
    profile prices, so that config.json records what was simulated."""
    from batchlab.core.cost.profile import load_profile, ProfileError  # lazy: only with --profile

    where = str(cfg.profile.path)
    try:
        profile = load_profile(cfg.profile.path)
    except ProfileError as e:
        raise UserError(str(e)) from None
    if cfg.hardware.tensor_parallel != 1:
        raise UserError(f"a profile prices one device as measured; tensor_parallel="
                        f"{cfg.hardware.tensor_parallel} does not apply")
    measured_on = f"profiled {profile.device_description()}"
    if model_named and not _same_model(cfg.model.name, profile):
        raise UserError(f"model {cfg.model.name!r} (--model / [model] name) contradicts profile "
                        f"{where}, measured on {profile.model_source or profile.model.name}: a "
                        f"profile simulates its own model; drop the model or the profile")
    if hardware_named and cfg.hardware.name != measured_on:
        raise UserError(f"hardware {cfg.hardware.name!r} (--hardware / [hardware] name) does not "
                        f"apply with profile {where}: it prices the device it was measured on "
                        f"({profile.device_description()}); drop the hardware or the profile")
    bs = cfg.scheduler.block_size
    blocks = cfg.scheduler.num_kv_blocks or profile.num_kv_blocks * profile.block_size // bs
    if blocks < 1:
        raise UserError(f"profile {where}: its KV capacity holds no block of {bs} tokens")
    warning = profile.smoke_test_warning()  # a --grid quick profile
    if warning:
        warn(f"{where}: {warning}")
    cfg.model.name = profile.model_source or profile.model.name  # what is simulated
    cfg.hardware.name = measured_on
    meta = SetupMeta(model=profile.model.name, hardware=measured_on, tensor_parallel=1,
                     dtype=profile.device.dtype, dtype_bytes=profile.model.dtype_bytes,
                     max_context=profile.model.max_context,
                     cost_model=f"profile ({profile.cost.combine} form)", profile=where,
                     profile_heldout_median_ape=profile.fit.heldout.median_ape)
    if warning:
        meta.profile_warning = warning
    if profile.loop:
        meta.loop_ms_per_step = round(profile.loop.per_step_s * 1e3, 4)
    if profile.front_end:
        meta.front_end_delay_ms = profile.front_end.delay_s * 1e3
        meta.front_end_serial_ms = profile.front_end.serial_s * 1e3
    return profile.simulation_cost(), blocks, meta
