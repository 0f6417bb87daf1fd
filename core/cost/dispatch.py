"""The one place that decides how a model as deployed is priced: a dense model on tensor
parallelism alone by the forms the profiles were fitted on (core/cost/roofline.py,
core/cost/gpu_form.py, the dense operator shapes), anything else (mixture of experts,
latent attention, sliding windows, PP, EP or DP attention) by their deployment forms
(core/cost/deployment.py, core/cost/gpu_deployment.py, core/cost/deployment_shapes.py)."""
from __future__ import annotations

from batchlab.core.cost.deployment import allreduces_per_step as layout_allreduces
from batchlab.core.cost.deployment import deployment_kv_blocks, deployment_roofline
from batchlab.core.cost.deployment_shapes import deployed_shapes
from batchlab.core.cost.form import CostForm
from batchlab.core.cost.gpu_deployment import DeployedGpuCost
from batchlab.core.cost.gpu_form import AllReduce, GpuCostModel, GpuCostParams
from batchlab.core.cost.operator_shapes import OperatorShapes
from batchlab.core.cost.roofline import allreduces_per_step as tp_allreduces
from batchlab.core.cost.roofline import dense_kv_blocks, dense_roofline
from batchlab.core.model.hardware import HardwareSpec
from batchlab.core.model.layout import Layout
from batchlab.core.model.spec import ModelSpec


def is_plain(model: ModelSpec, layout: Layout) -> bool:
    """A dense model without windows or latent attention on TP alone: the form and KV
    capacity batchlab has always priced (RooflineCostModel), unchanged."""
    return layout.is_plain_tp and not (model.is_moe or model.is_mla or model.layer_windows)


def roofline(model: ModelSpec, hw: HardwareSpec, tensor_parallel: int = 1,
             mem_efficiency: float = 1.0, compute_efficiency: float = 1.0,
             overhead_s: float = 0.0, allreduce_latency_s: float | None = None,
             layout: Layout | None = None) -> CostForm:
    """The model's dtypes are its bytes (with_dtypes): weights of 1 byte are fp8 and run
    at the GPU's fp8 peak (an error where it has none); attention runs at the 16-bit
    peak whatever the KV cache stores. allreduce_latency_s: None is the preset's.
    layout: TP, PP, EP and DP attention (default: TP tensor_parallel alone)."""
    layout = layout or Layout(tp=tensor_parallel)
    peak = hw.flops_for("fp8" if model.dtype_bytes == 1 else "bf16")
    # mxfp4 experts (gpt-oss) are read at their 4.25 bits and multiplied at the weights'
    # 16-bit peak, as engines dequantise them on GPUs without fp4 tensor cores.
    if not is_plain(model, layout):
        return deployment_roofline(model, hw, layout, mem_efficiency, compute_efficiency,
                                   overhead_s, allreduce_latency_s, peak)
    return dense_roofline(model, hw, tensor_parallel, peak, mem_efficiency, compute_efficiency,
                          overhead_s, allreduce_latency_s)


def kv_capacity_blocks(model: ModelSpec, hw: HardwareSpec, tensor_parallel: int,
                       block_size: int, memory_utilization: float = 0.9,
                       layout: Layout | None = None, max_num_seqs: int = 256) -> int:
    """KV blocks that fit in the memory left after weights (vLLM's
    gpu_memory_utilization: the rest is headroom for activations and the runtime)."""
    layout = layout or Layout(tp=tensor_parallel)
    if not is_plain(model, layout):
        return deployment_kv_blocks(model, hw, layout, block_size, memory_utilization, max_num_seqs)
    return dense_kv_blocks(model, hw, tensor_parallel, block_size, memory_utilization)


def step_allreduces(model: ModelSpec, layout: Layout) -> int:
    """TP all-reduces one GPU of the busiest stage runs a step, as the price counts them
    (the setups' assumptions line)."""
    if is_plain(model, layout):
        return tp_allreduces(model, layout.tp)
    return round(layout_allreduces(model, layout))


def operator_shapes(model: ModelSpec, layout: Layout | int = 1) -> OperatorShapes:
    """model's per-GPU shapes under this layout (an int: TP alone). A layout that does not
    fit the model is a ValueError (Layout.check's one line)."""
    if isinstance(layout, int):
        layout = Layout(tp=layout)
    if is_plain(model, layout):
        return OperatorShapes.dense(model, layout.tp)
    return deployed_shapes(model, layout)


def gpu_cost(shapes: OperatorShapes, params: GpuCostParams, mem_bandwidth: float, peak_flops: float,
             peak_flops_16: float, allreduce: AllReduce) -> GpuCostModel:
    """The GPU form for these shapes on a GPU of these datasheet figures: dense shapes by
    GpuCostModel, any other by DeployedGpuCost."""
    form = GpuCostModel if shapes.is_dense else DeployedGpuCost
    return form.build(shapes, params, mem_bandwidth, peak_flops, peak_flops_16, allreduce)
