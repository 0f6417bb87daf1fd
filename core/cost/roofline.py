"""The roofline of a dense model on tensor parallelism alone: overhead + max(bytes moved /
bandwidth, FLOPs / peak) + the TP all-reduces, from datasheet figures scaled by assumed
efficiencies. core/cost/deployment.py prices everything else (MoE, MLA, windows, PP/EP);
core/cost/dispatch.py picks between them."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.core.cost.form import FormDefaults, growing
from batchlab.core.features import StepFeatures
from batchlab.core.model.hardware import HardwareSpec
from batchlab.core.model.layout import kv_shards
from batchlab.core.model.spec import ModelSpec


# A roofline prices decode stretches shorter than this in plain Python (decode_times).
SHORT_PLAIN = 48


@dataclass(frozen=True, slots=True)
class RooflineCostModel(FormDefaults):
    """overhead + max(bytes moved / bandwidth, FLOPs / peak) + tensor-parallel all-reduce.

    Bytes: the weights once per step (they are shared by every sequence in the batch:
    the whole point of batching) plus every KV slot attention reads. All figures are
    per GPU; bandwidth and peak are already scaled by achievable efficiency. At a measured
    speed the whole step is slowed (FormDefaults.at_speed): the measured compute side is a
    fitted profile's FLOP terms."""

    weight_bytes: float
    kv_bytes_per_token: float
    flops_per_token: float
    attention_flops_per_pair: float
    mem_bandwidth: float
    peak_flops: float
    overhead_s: float = 0.0
    comm_bytes_per_token: float = 0.0  # all-reduce traffic per token per GPU
    comm_bandwidth: float = 1.0
    comm_latency_s: float = 0.0  # per step, all layers together

    def step_time(self, f: StepFeatures) -> float:
        tokens = f.prefill_tokens + f.decode_tokens
        t_mem = (self.weight_bytes + self.kv_bytes_per_token * f.kv_tokens_read) / self.mem_bandwidth
        t_flops = (self.flops_per_token * tokens
                   + self.attention_flops_per_pair * f.attention_pairs) / self.peak_flops
        t_comm = 0.0
        if self.comm_bytes_per_token:
            t_comm = self.comm_latency_s + self.comm_bytes_per_token * tokens / self.comm_bandwidth
        return self.overhead_s + max(t_mem, t_flops) + t_comm

    def decode_times(self, n: int, kv0: int, m: int) -> list[float]:
        """step_time of m decode-only steps of n sequences reading kv0, kv0 + n, ... KV
        tokens: below SHORT_PLAIN steps the same arithmetic in plain Python, cheaper than
        numpy for short runs; from there decode_run_times."""
        if m >= SHORT_PLAIN:
            return self.decode_run_times(StepFeatures(n, 0, 0, n, kv0, kv0), m).tolist()
        w, kvb, bw = self.weight_bytes, self.kv_bytes_per_token, self.mem_bandwidth
        flops, afp, peak = self.flops_per_token * n, self.attention_flops_per_pair, self.peak_flops
        t_comm = 0.0
        if self.comm_bytes_per_token:
            t_comm = self.comm_latency_s + self.comm_bytes_per_token * n / self.comm_bandwidth
        o = self.overhead_s
        out: list[float] = []
        for j in range(m):  # a for statement: compiled, a comprehension's range is a Python call
            kv = kv0 + j * n
            out.append(o + max((w + kvb * kv) / bw, (flops + afp * kv) / peak) + t_comm)
        return out

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        """step_time of m steady decode steps, vectorised with the same arithmetic."""
        kv, pairs = growing(f, m)
        tokens = f.prefill_tokens + f.decode_tokens
        t_mem = (self.weight_bytes + self.kv_bytes_per_token * kv) / self.mem_bandwidth
        t_flops = (self.flops_per_token * tokens
                   + self.attention_flops_per_pair * pairs) / self.peak_flops
        t_comm = 0.0
        if self.comm_bytes_per_token:
            t_comm = self.comm_latency_s + self.comm_bytes_per_token * tokens / self.comm_bandwidth
        return self.overhead_s + np.maximum(t_mem, t_flops) + t_comm


def allreduces_per_step(model: ModelSpec, tensor_parallel: int) -> int:
    """Megatron-style TP: one all-reduce after attention, one after the MLP, per layer."""
    return 2 * model.num_layers if tensor_parallel > 1 else 0


def dense_roofline(model: ModelSpec, hw: HardwareSpec, tensor_parallel: int, peak: float,
                   mem_efficiency: float = 1.0, compute_efficiency: float = 1.0,
                   overhead_s: float = 0.0, allreduce_latency_s: float | None = None) -> RooflineCostModel:
    """peak: the tensor-core FLOP/s the weights' dtype runs at (core/cost/dispatch.py picks
    it); allreduce_latency_s: None is the preset's."""
    tp = tensor_parallel
    shards = kv_shards(model, tp)
    comm_bytes = comm_latency = 0.0
    if tp > 1:
        # Each all-reduce sums the hidden state of every token; a ring moves 2(tp-1)/tp of it.
        n = allreduces_per_step(model, tp)
        comm_bytes = n * model.hidden_size * model.activation_bytes * 2 * (tp - 1) / tp
        latency = hw.allreduce_latency_s if allreduce_latency_s is None else allreduce_latency_s
        comm_latency = n * latency
        if hw.interconnect_bandwidth <= 0:
            raise ValueError(f"hardware {hw.name!r} has no interconnect_bandwidth for tensor_parallel={tp}")
    return RooflineCostModel(
        weight_bytes=model.params_read_per_step * model.dtype_bytes / tp,
        kv_bytes_per_token=model.kv_bytes_per_token / shards,  # each GPU reads its share
        flops_per_token=model.flops_per_token / tp,
        # One peak prices all FLOPs: attention's are scaled to what they cost at 16 bits.
        attention_flops_per_pair=model.attention_flops_per_pair / tp * peak / hw.peak_flops,
        mem_bandwidth=hw.mem_bandwidth * mem_efficiency,
        peak_flops=peak * compute_efficiency,
        overhead_s=overhead_s,
        comm_bytes_per_token=comm_bytes,
        comm_bandwidth=hw.interconnect_bandwidth or 1.0,
        comm_latency_s=comm_latency,
    )


def dense_kv_blocks(model: ModelSpec, hw: HardwareSpec, tensor_parallel: int, block_size: int,
                    memory_utilization: float = 0.9) -> int:
    """KV blocks that fit in the memory left after weights (vLLM's
    gpu_memory_utilization: the rest is headroom for activations and the runtime)."""
    free = hw.memory_bytes * tensor_parallel * memory_utilization - model.weight_bytes
    # Replicated KV heads (tp above the KV head count) store each token tp/shards times.
    per_token = model.kv_bytes_per_token * tensor_parallel / kv_shards(model, tensor_parallel)
    blocks = int(free // (per_token * block_size))
    if blocks < 1 and free > 0:  # memory is left, but not a block's worth
        raise ValueError(f"a KV block of {block_size:,} tokens (block_size) takes "
                         f"{per_token * block_size / 2**30:.3g} GiB of {model.name}'s KV; "
                         f"{tensor_parallel} x {hw.name} leaves {free / 2**30:.1f} GiB after "
                         f"the weights: give a smaller block size")
    if blocks < 1:
        need = model.weight_bytes / 2**30
        have = hw.memory_bytes * tensor_parallel * memory_utilization / 2**30
        raise ValueError(f"model {model.name} ({need:.1f} GiB of weights) leaves no KV memory on "
                         f"{tensor_parallel} x {hw.name} ({have:.1f} GiB usable)")
    return blocks
