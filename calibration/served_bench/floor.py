"""The least time a benchmark row's closed loop can take on its GPUs, from its stated
lengths: each user's prompt prefilled once a cycle, every GEMM at the datasheet's peak
FLOP/s for the weights' dtype and every all-reduce at the engine's best bytes a second
(the paths and prices the served engine uses: core/cost/served), nothing overlapped, as
vLLM's defaults run a step. Decode steps, attention and the engine's own time only add to
it. A row whose measured cycle, TTFT + (osl - 1) x TPOT, is shorter ran less than it
states (prompts a prefix cache held, shorter prompts): no price of its stated work can
reach it, and the judgement says so."""
from __future__ import annotations

from dataclasses import dataclass

from batchlab.calibration.served_bench.read import BenchmarkRow
from batchlab.core.cost.gpu_form import AllReduce
from batchlab.core.model.hardware import HardwareSpec
from batchlab.core.model.spec import ModelSpec

ACTIVATION_BYTES = 2  # bf16 activations: what a tensor-parallel all-reduce moves
ALLREDUCES_A_LAYER = 2  # after attention's output projection and after the MLP (or experts)
# Message sizes the best bytes a second is sought over: a step's all-reduce is at most
# max_num_batched_tokens x hidden x 2 bytes (8192 x 16384 x 2 = 256 MiB).
SIZES = tuple(float(1 << k) for k in range(16, 29))


@dataclass(frozen=True)
class Floor:
    row: BenchmarkRow
    cycle_s: float  # measured: TTFT + (osl - 1) x TPOT
    floor_s: float  # the cycle's prefills at the floor

    @property
    def below(self) -> bool:
        return self.cycle_s < self.floor_s


def gemm_seconds_a_token(model: ModelSpec, hw: HardwareSpec, tp: int) -> float:
    """A prompt token's GEMMs on one of `tp` GPUs at the datasheet's peak for the weights'
    dtype: every layer's projections, its experts only (a prefill computes logits for its
    last token alone, so no LM head; the embedding is a gather)."""
    flops = 2 * (model.active_params - model.vocab_size * model.hidden_size)
    return flops / tp / hw.flops_for("fp8" if model.dtype_bytes == 1 else "bf16")


def allreduce_seconds_a_token(model: ModelSpec, allreduce: AllReduce, tp: int) -> float:
    """A prompt token's all-reduces at the best bytes a second `allreduce` gives over SIZES."""
    if tp <= 1:
        return 0.0
    per_byte = min(allreduce.time(s, tp) / s for s in SIZES)
    return ALLREDUCES_A_LAYER * model.num_layers * model.hidden_size * ACTIVATION_BYTES * per_byte


def prefill_floor(row: BenchmarkRow, model: ModelSpec, hw: HardwareSpec, allreduce: AllReduce) -> Floor:
    a_token = gemm_seconds_a_token(model, hw, row.tp) + allreduce_seconds_a_token(model, allreduce, row.tp)
    return Floor(row, row.ttft_s + (row.osl - 1) * row.tpot_s, row.concurrency * row.isl * a_token)
