"""The roofline setup: a cost model and a KV capacity from the model and hardware
presets, served in the config's dtypes, and what they assume (the run's meta)."""
from __future__ import annotations

import logging

from batchlab.core.cost.dispatch import is_plain, kv_capacity_blocks, roofline, step_allreduces
from batchlab.core.cost.form import CostModel
from batchlab.core.cost.deployment import deployment_terms
from batchlab.core.model.hardware import HardwareSpec
from batchlab.core.model.presets import lookup_model
from batchlab.core.model.spec import ModelSpec
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.setup.dtypes import served_model
from batchlab.experiments.setup.meta import SetupMeta

log = logging.getLogger("batchlab")


def roofline_setup(cfg: ExperimentConfig) -> tuple[CostModel, int, SetupMeta]:
    """Roofline cost model and KV capacity from the model and hardware presets, served
    in the config's dtypes."""
    try:
        preset = lookup_model(cfg.model.name)
        hw = cfg.hardware.spec()
        model, weights, kv = served_model(cfg, preset)
        h = cfg.hardware
        layout = h.layout()
        cost = roofline(model, hw, h.tensor_parallel, h.mem_efficiency, h.compute_efficiency,
                        h.step_overhead_s, h.allreduce_latency_s, layout=layout)
    except ValueError as e:
        raise UserError(str(e)) from None
    blocks = kv_blocks(cfg, model, hw)
    latency = hw.allreduce_latency_s if h.allreduce_latency_s is None else h.allreduce_latency_s
    meta = SetupMeta(model=model.name, hardware=hw.name, tensor_parallel=h.tensor_parallel,
                     cost_model="roofline", max_context=model.max_context,
                     mem_efficiency=h.mem_efficiency, compute_efficiency=h.compute_efficiency,
                     step_overhead_s=h.step_overhead_s, weights_dtype=weights, kv_cache_dtype=kv,
                     allreduces_per_step=step_allreduces(model, layout),
                     allreduce_latency_s=latency, interconnect=hw.interconnect,
                     interconnect_bandwidth=hw.interconnect_bandwidth)
    if not layout.is_plain_tp:
        meta.pipeline_parallel, meta.expert_parallel = layout.pp, layout.ep
        meta.data_parallel_attention = layout.dp_attention
    if not is_plain(model, layout):
        meta.deployment = deployment_terms(model, cost)
    return cost, blocks, meta


def kv_blocks(cfg: ExperimentConfig, model: ModelSpec, hw: HardwareSpec) -> int:
    """The KV pool in blocks (every setup's): [scheduler] num_kv_blocks where given, warned
    about where the memory cannot hold it, else what [hardware] gpu_memory_utilization of
    the memory holds after the weights (UserError where the weights leave none)."""
    if cfg.scheduler.num_kv_blocks:
        warn_if_kv_cannot_fit(cfg, model, hw)
        return cfg.scheduler.num_kv_blocks
    try:
        return _capacity(cfg, model, hw, cfg.hardware.gpu_memory_utilization)
    except ValueError as e:
        raise UserError(str(e)) from None


def _capacity(cfg: ExperimentConfig, model: ModelSpec, hw: HardwareSpec, utilization: float) -> int:
    h, sc = cfg.hardware, cfg.scheduler
    return kv_capacity_blocks(model, hw, h.tensor_parallel, sc.block_size, utilization,
                              layout=h.layout(), max_num_seqs=sc.max_num_seqs)


def warn_if_kv_cannot_fit(cfg: ExperimentConfig, model: ModelSpec, hw: HardwareSpec) -> None:
    """A KV pool given in blocks is the user's call, but one larger than all the memory
    the weights leave would price steps for memory the hardware does not have."""
    h, sc = cfg.hardware, cfg.scheduler
    try:
        most = _capacity(cfg, model, hw, 1.0)
    except ValueError:
        most = 0  # the weights alone fill the memory
    if sc.num_kv_blocks > most:
        log.warning("scheduler.num_kv_blocks (--num-kv-blocks) %d exceeds the %d blocks of %d "
                    "tokens that fit in %d x %s memory after %s's weights; the results assume "
                    "memory the hardware does not have", sc.num_kv_blocks, most, sc.block_size,
                    h.tensor_parallel, hw.name, model.name)
