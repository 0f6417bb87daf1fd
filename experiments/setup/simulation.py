"""From an experiment config to what the simulator needs (cost model, KV blocks, one
scheduler per policy) and the assumptions behind it, printed with every answer. The one
setup simulate, capacity, sweep and their points call."""
from __future__ import annotations

from dataclasses import dataclass

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.form import CostModel
from batchlab.core.cost.served.formats import weight_formats
from batchlab.core.emission import Emission
from batchlab.core.front_end import FrontEnd
from batchlab.core.kv_tiers import TierConfig
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.setup.engine import apply_engine_defaults, engine_defaults, kv_pool_default
from batchlab.experiments.setup.gpu import gpu_setup, roofline_because
from batchlab.experiments.setup.kv_tier import checked_tier
from batchlab.experiments.setup.meta import SetupMeta
from batchlab.experiments.setup.profile import profile_setup
from batchlab.experiments.setup.roofline import roofline_setup
from batchlab.experiments.setup.served import as_served
from batchlab.experiments.setup.speculative import SpeculativeSetup, speculative_setup, target_model


@dataclass
class SimSetup:
    cost: CostModel
    blocks: int
    meta: SetupMeta
    schedulers: dict[str, SchedulerConfig]
    speculative: SpeculativeSetup | None = None  # cost already holds the draft's passes
    kv_tier: TierConfig | None = None
    kv_bytes_per_token: float = 0.0  # per GPU: what the tier moves and holds per token

    def emission(self, seed: int) -> Emission | None:
        """A run's emission (None: one token a step, no speculation)."""
        return self.speculative.emission(seed) if self.speculative else None

    def assumptions(self) -> list[str]:
        tier = [f"  {self.kv_tier.describe()}"] if self.kv_tier else []
        return assumption_lines(self.meta) + tier

    @property
    def tier_options(self) -> dict:
        """simulate()'s KV tier arguments (none without a tier)."""
        return ({"kv_tier": self.kv_tier, "kv_bytes_per_token": self.kv_bytes_per_token}
                if self.kv_tier else {})

    @property
    def front_end(self) -> FrontEnd | None:
        return self.meta.front_end


def sim_setup(cfg: ExperimentConfig, model_named: bool = False, hardware_named: bool = False) -> SimSetup:
    """Everything is checked here, before anything runs or --out is cleared."""
    because = None if cfg.profile.path else roofline_because(cfg)
    if cfg.hardware.knobs and (cfg.profile.path or because):
        raise UserError(f"[hardware] knobs {sorted(cfg.hardware.knobs)}: they replace a GPU profile's "
                        f"constants, and this run is priced by the "
                        f"{'calibration profile' if cfg.profile.path else 'roofline'}")
    if cfg.profile.path:
        cost, blocks, meta = profile_setup(cfg, model_named, hardware_named)
        hw = None  # a profiled device: the engine defaults key on a preset's memory
    elif because:
        cost, blocks, meta = roofline_setup(cfg)
        meta.roofline_because = because
        hw = cfg.hardware.spec()
    else:
        cost, blocks, meta = gpu_setup(cfg, cfg.hardware.knobs)
        hw = cfg.hardware.spec()
    given = cfg.scheduler.model_fields_set
    schedulers, applied = {}, set()
    for name, p, admission in cfg.runs():
        sc = cfg.scheduler_for(p, meta.max_context, admission)
        if hw is not None:
            d = engine_defaults(hw)
            sc, done = apply_engine_defaults(sc, given, d)
            applied.update(f"{a} ({p})" if "tokens" in a else a for a in done)
        schedulers[name] = sc
    if hw is not None and applied:
        meta.scheduler_defaults = f"{', '.join(sorted(applied))}: not given, {engine_defaults(hw).why}"
    else:
        meta.scheduler_defaults = "as given" if hw is not None else "batchlab's (profiled device)"
    if "max_num_seqs" in cfg._demo_scheduler:
        rule = f" where vLLM's rule gives {engine_defaults(hw).max_num_seqs}" if hw is not None else ""
        meta.scheduler_defaults += (f"; max_num_seqs={cfg.scheduler.max_num_seqs}: the built-in demo's, "
                                    f"sized to show its point{rule} (give --max-num-seqs or a --config)")
    if hw is not None and not cfg.scheduler.num_kv_blocks:
        meta.scheduler_defaults += f"; KV pool: {kv_pool_default(cfg.hardware)}"
    meta.max_num_seqs = {p: s.max_num_seqs for p, s in schedulers.items()}
    if meta.cost_model == "gpu profile" and hw is not None:  # the kernels' sum as the engine runs it
        sp = cfg.speculative  # a speculating decode runs 1 + k tokens: wider capture sizes
        cost = as_served(cost, cfg.hardware.served_engine, hw, max(meta.max_num_seqs.values()), meta,
                         cfg.hardware.knobs, 1 + sp.num_speculative_tokens if sp.on else 1,
                         weight_formats(target_model(cfg)))
    speculative = None
    if cfg.speculative.on:  # the target as served, the draft's passes beside it
        cost, blocks, speculative = speculative_setup(cfg, cost, blocks, meta, target_model(cfg))
    meta.block_size = cfg.scheduler.block_size
    meta.num_kv_blocks = blocks
    if cfg.kv_tier is None:
        return SimSetup(cost, blocks, meta, schedulers, speculative=speculative)
    return SimSetup(cost, blocks, meta, schedulers, speculative=speculative, kv_tier=cfg.kv_tier,
                    kv_bytes_per_token=checked_tier(cfg, speculative.draft if speculative else None))


def assumption_lines(meta: SetupMeta) -> list[str]:
    """What the answer rests on, in words: printed with every table."""
    m = meta
    if m.cost_model == "roofline":
        w = m.weights_dtype
        cost = (f"roofline: {m.mem_efficiency:.0%} of datasheet memory bandwidth, "
                f"{m.compute_efficiency:.0%} of {w} FLOP/s, step overhead "
                f"{m.step_overhead_s * 1e3:.2f} ms; weights {w}, KV cache {m.kv_cache_dtype}")
        n = m.allreduces_per_step
        comm = (f"TP {m.tensor_parallel}: {n} all-reduces a step, "
                f"{m.allreduce_latency_s * 1e6:.0f} us each plus bytes over "
                f"{m.interconnect} at {m.interconnect_bandwidth / 1e9:.0f} GB/s"
                if n else "TP 1: no all-reduce")
        if m.pipeline_parallel or m.expert_parallel or m.data_parallel_attention:
            comm = (f"PP {m.pipeline_parallel}, EP {m.expert_parallel}"
                    f"{', DP attention' if m.data_parallel_attention else ''}; {comm}")
        if m.roofline_because:
            cost += f" (the roofline: {m.roofline_because})"

    elif m.cost_model == "gpu profile":
        return gpu_profile_lines(m)
    else:
        cost = f"{m.cost_model} from {m.profile} (its fitted step overhead and dtype)"
        comm = "one device as profiled"
        if m.front_end is not None:
            comm += (f"; the server's front end before the engine: {m.front_end_delay_ms:.1f} ms a "
                     f"request, {m.front_end_serial_ms:.2f} ms more a request of a burst")
    return [f"assumptions: {cost}",
            *([f"  {m.deployment}"] if m.deployment else []),
            f"  {comm}; {m.num_kv_blocks} KV blocks of {m.block_size} tokens per replica",
            f"  scheduler defaults: {m.scheduler_defaults}",
            *([f"  speculative decoding: {m.speculation}"] if m.speculation else [])]


def gpu_profile_lines(m: SetupMeta) -> list[str]:
    """A GPU preset priced by a GPU profile: which one, from what data, how well it prices
    held-out models, and what it assumes."""
    interval = f"; {m.gpu_profile_scaled_interval}, varied by --sensitivity" if m.gpu_profile_scaled_interval else ""
    scaled = (f" (no operator tables for {m.hardware}: {m.gpu_profile_scaled_from}'s constants "
              f"scaled by datasheet ratios{interval})" if m.gpu_profile_scaled_from else "")
    on = (f" on {m.gpu_profile_scaled_from} (none measured on {m.hardware})"
          if m.gpu_profile_scaled_from else "")
    n = m.allreduces_per_step
    comm = f"TP {m.tensor_parallel}: {n} all-reduces a step, {m.gpu_profile_allreduce}" if n else "TP 1: no all-reduce"
    fitted = "fitted on 16-bit GEMMs, assumed for fp8" if m.weights_dtype == "fp8" else "fitted"
    cost = (f"GPU profile {m.gpu_profile}{scaled}: {m.mem_efficiency:.0%} of datasheet bandwidth, "
            f"{m.compute_efficiency:.0%} of {m.weights_dtype} FLOP/s ({fitted}), ridge, per-GEMM/per-layer "
            f"and attention terms fitted; step overhead {m.step_overhead_s * 1e3:.2f} ms assumed; "
            f"weights {m.weights_dtype}, KV cache {m.kv_cache_dtype}")
    return [f"assumptions: {cost}",
            f"  fitted on {m.gpu_profile_source}",
            f"  held-out per-step error{on}: {m.gpu_profile_heldout}",
            f"  served engine: {m.served_engine or 'none (the kernels as timed one at a time, eager)'}",
            *([f"  {m.deployment}"] if m.deployment else []),
            f"  {comm}; {m.num_kv_blocks} KV blocks of {m.block_size} tokens per replica",
            f"  scheduler defaults: {m.scheduler_defaults}",
            *([f"  speculative decoding: {m.speculation}"] if m.speculation else [])]
