"""What a simulation rests on, typed: the model and device, the cost model and what it
assumes, the KV pool and the scheduler defaults. The setup builds it, the assumption lines
and the capacity rows read it, and a simulated run's meta.json begins with it (in the
order the setup gave the keys: a Record writes back exactly what it was given)."""
from __future__ import annotations

from batchlab.core.front_end import FrontEnd
from batchlab.core.run_meta import Number, Record


class SetupMeta(Record):
    model: str
    hardware: str
    tensor_parallel: int = 1
    cost_model: str  # "roofline", "gpu profile", or "profile (FORM form)"
    max_context: int
    # the roofline's assumptions (a GPU profile's fitted efficiencies; None with a profile)
    mem_efficiency: Number | None = None
    compute_efficiency: Number | None = None
    step_overhead_s: Number | None = None
    gpu_memory_utilization: Number | None = None
    weights_dtype: str | None = None
    kv_cache_dtype: str | None = None
    allreduces_per_step: int | None = None
    allreduce_latency_s: Number | None = None
    interconnect: str | None = None
    interconnect_bandwidth: Number | None = None
    # a layout beyond TP, and what a MoE / MLA / windowed model is priced by (words)
    pipeline_parallel: int | None = None
    expert_parallel: int | None = None
    data_parallel_attention: bool | None = None
    deployment: str | None = None
    roofline_because: str | None = None  # why a GPU preset is priced by the roofline, not its profile
    # a profile's (None on the roofline)
    dtype: str | None = None  # weights and KV cache alike
    dtype_bytes: int | None = None
    profile: str | None = None  # the profile's path, as given
    profile_heldout_median_ape: Number | None = None
    profile_warning: str | None = None
    loop_ms_per_step: Number | None = None
    # a server's front end before the engine (a profile fitted on client timings)
    front_end_delay_ms: Number | None = None
    front_end_serial_ms: Number | None = None
    # a GPU profile's (cost_model "gpu profile": experiments/setup/gpu.py)
    gpu_profile: str | None = None  # "shipped a100-80gb", "shipped h100-sxm, scaled to h200", a path
    gpu_profile_source: str | None = None
    gpu_profile_heldout: str | None = None  # its per-step error on held-out models and TP degrees
    gpu_profile_heldout_median: Number | None = None
    gpu_profile_scaled_from: str | None = None
    gpu_profile_scaled_interval: str | None = None  # the scaling's own error (set only where scaled)
    gpu_profile_allreduce: str | None = None  # what prices this TP degree's all-reduces
    served_engine: str | None = None  # the served-engine terms on the GPU profile (experiments/setup/served.py)
    knobs: dict[str, Number] | None = None  # constants replaced by value (sensitivity)
    # the pool and the schedulers, once sim_setup has made them
    scheduler_defaults: str | None = None
    max_num_seqs: dict[str, int] | None = None  # per run (policy)
    block_size: int | None = None
    num_kv_blocks: int | None = None
    speculation: str | None = None  # speculative decoding, in words (experiments/setup/speculative.py)

    @property
    def front_end(self) -> FrontEnd | None:
        """The front end the simulation puts before the engine (None: requests reach it
        when sent)."""
        if self.front_end_delay_ms is None:
            return None
        return FrontEnd(self.front_end_delay_ms / 1e3, (self.front_end_serial_ms or 0.0) / 1e3)

    @property
    def served_dtypes(self) -> tuple[str | None, str | None]:
        """(weights, KV cache) dtypes as simulated, whichever setup made them."""
        return self.weights_dtype or self.dtype, self.kv_cache_dtype or self.dtype
