"""From an experiment config to what the simulator needs (cost model, KV blocks, one
scheduler per policy) and the assumptions behind it, printed with every answer."""
from __future__ import annotations

import logging
from dataclasses import dataclass

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost import CostModel, allreduces_per_step, kv_capacity_blocks, roofline
from batchlab.core.specs import HardwareSpec, ModelSpec, lookup_hardware, lookup_model
from batchlab.experiments.calibrate_cmd import profile_setup
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.engine_defaults import apply_engine_defaults, engine_defaults
from batchlab.experiments.errors import UserError
from batchlab.experiments.roofline_options import served_model

log = logging.getLogger("batchlab")


@dataclass
class SimSetup:
    cost: CostModel
    blocks: int
    meta: dict
    schedulers: dict[str, SchedulerConfig]

    def assumptions(self) -> list[str]:
        return assumption_lines(self.meta)


def sim_setup(cfg: ExperimentConfig, model_named: bool = False, hardware_named: bool = False) -> SimSetup:
    """Everything is checked here, before anything runs or --out is cleared."""
    if cfg.profile.path:
        cost, blocks, meta = profile_setup(cfg, model_named, hardware_named)
        hw = None  # a profiled device: the engine defaults key on a preset's memory
    else:
        cost, blocks, meta = roofline_setup(cfg)
        hw = lookup_hardware(cfg.hardware.name)
    given = cfg.scheduler.model_fields_set
    schedulers, applied = {}, set()
    for name, p, admission in cfg.runs():
        sc = cfg.scheduler_for(p, meta["max_context"], admission)
        if hw is not None:
            d = engine_defaults(hw)
            sc, done = apply_engine_defaults(sc, given, d)
            applied.update(f"{a} ({p})" if "tokens" in a else a for a in done)
        schedulers[name] = sc
    if hw is not None and applied:
        meta["scheduler_defaults"] = f"{engine_defaults(hw).why}: {', '.join(sorted(applied))}"
    else:
        meta["scheduler_defaults"] = "as given" if hw is not None else "batchlab's (profiled device)"
    meta["max_num_seqs"] = {p: s.max_num_seqs for p, s in schedulers.items()}
    meta["block_size"] = cfg.scheduler.block_size
    meta["num_kv_blocks"] = blocks
    return SimSetup(cost, blocks, meta, schedulers)


def roofline_setup(cfg: ExperimentConfig) -> tuple[CostModel, int, dict]:
    """Roofline cost model and KV capacity from the model and hardware presets, served
    in the config's dtypes."""
    try:
        preset = lookup_model(cfg.model.name)
        hw = lookup_hardware(cfg.hardware.name)
        model, weights, kv = served_model(cfg, preset)
        h = cfg.hardware
        cost = roofline(model, hw, h.tensor_parallel, h.mem_efficiency, h.compute_efficiency,
                        h.step_overhead_s, h.allreduce_latency_s)
        blocks = cfg.scheduler.num_kv_blocks or kv_capacity_blocks(
            model, hw, h.tensor_parallel, cfg.scheduler.block_size, h.gpu_memory_utilization)
    except ValueError as e:
        raise UserError(str(e)) from None
    if cfg.scheduler.num_kv_blocks:
        _warn_if_kv_cannot_fit(cfg, model, hw)
    latency = hw.allreduce_latency_s if h.allreduce_latency_s is None else h.allreduce_latency_s
    meta = {"model": model.name, "hardware": hw.name, "tensor_parallel": h.tensor_parallel,
            "cost_model": "roofline", "max_context": model.max_context,
            "mem_efficiency": h.mem_efficiency, "compute_efficiency": h.compute_efficiency,
            "step_overhead_s": h.step_overhead_s, "weights_dtype": weights, "kv_cache_dtype": kv,
            "allreduces_per_step": allreduces_per_step(model, h.tensor_parallel),
            "allreduce_latency_s": latency, "interconnect": hw.interconnect,
            "interconnect_bandwidth": hw.interconnect_bandwidth}
    return cost, blocks, meta


def _warn_if_kv_cannot_fit(cfg: ExperimentConfig, model: ModelSpec, hw: HardwareSpec) -> None:
    """A KV pool given in blocks is the user's call, but one larger than all the memory
    the weights leave would price steps for memory the hardware does not have."""
    h, sc = cfg.hardware, cfg.scheduler
    try:
        most = kv_capacity_blocks(model, hw, h.tensor_parallel, sc.block_size, 1.0)
    except ValueError:
        most = 0  # the weights alone fill the memory
    if sc.num_kv_blocks > most:
        log.warning("scheduler.num_kv_blocks (--num-kv-blocks) %d exceeds the %d blocks of %d "
                    "tokens that fit in %d x %s memory after %s's weights; the results assume "
                    "memory the hardware does not have", sc.num_kv_blocks, most, sc.block_size,
                    h.tensor_parallel, hw.name, model.name)


def assumption_lines(meta: dict) -> list[str]:
    """What the answer rests on, in words: printed with every table."""
    if meta["cost_model"] == "roofline":
        w = meta["weights_dtype"]
        cost = (f"roofline: {meta['mem_efficiency']:.0%} of datasheet memory bandwidth, "
                f"{meta['compute_efficiency']:.0%} of {w} FLOP/s, step overhead "
                f"{meta['step_overhead_s'] * 1e3:.2f} ms; weights {w}, KV cache {meta['kv_cache_dtype']}")
        n = meta["allreduces_per_step"]
        comm = (f"TP {meta['tensor_parallel']}: {n} all-reduces a step, "
                f"{meta['allreduce_latency_s'] * 1e6:.0f} us each plus bytes over "
                f"{meta['interconnect']} at {meta['interconnect_bandwidth'] / 1e9:.0f} GB/s"
                if n else "TP 1: no all-reduce")
    else:
        cost = f"{meta['cost_model']} from {meta.get('profile')} (its fitted step overhead and dtype)"
        comm = "one device as profiled"
    return [f"assumptions: {cost}",
            f"  {comm}; {meta['num_kv_blocks']} KV blocks of {meta['block_size']} tokens per replica",
            f"  scheduler defaults: {meta['scheduler_defaults']}"]
