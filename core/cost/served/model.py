"""A step priced as a served engine runs it (engine.py's facts, terms.py's constants): a
decode batch within the largest capture size from a full CUDA graph, a prefill or mixed
batch within it from piecewise graphs, anything larger eagerly; the engine's all-reduce
by message size."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from batchlab.core.cost.dispatch import gpu_cost
from batchlab.core.cost.form import FormDefaults
from batchlab.core.cost.gpu_form import AllReduce, GpuCostModel
from batchlab.core.cost.served.engine import EngineFacts
from batchlab.core.cost.served.terms import ServedTerms
from batchlab.core.features import StepFeatures


@dataclass(frozen=True, slots=True)
class EngineAllReduce(AllReduce):
    """The engine's all-reduce by message size (engine.py): its own below `custom_below`
    bytes at `custom_scale` of NCCL's measured time for the message; symmetric memory below
    `symm_below`, that latency plus the bytes each GPU moves (one message's worth by NVLink
    SHARP, 2 (n - 1) / n of it two-shot) at `symm_efficiency` of the link's one-way
    bandwidth; the measured NCCL table above."""
    custom_scale: float = 1.0
    custom_below: float = 0.0
    symm_below: float = 0.0
    multimem: bool = False
    symm_efficiency: float = 1.0

    def time(self, nbytes: float, gpus: int) -> float:
        if gpus <= 1 or nbytes <= 0:
            return 0.0
        if nbytes < self.custom_below:
            return AllReduce.time(self, nbytes, gpus) * self.custom_scale
        if nbytes < self.symm_below:
            moved = nbytes if self.multimem else 2 * (gpus - 1) / gpus * nbytes
            floor = AllReduce.time(self, 1.0, gpus) * self.custom_scale
            return floor + moved / (self.bandwidth * self.symm_efficiency)
        return AllReduce.time(self, nbytes, gpus)


@dataclass(frozen=True, slots=True)
class ServedGpuCost(FormDefaults):
    graph: GpuCostModel  # a decode batch from a full graph
    piecewise: GpuCostModel  # a prefill or mixed batch from piecewise graphs
    eager: GpuCostModel  # past the largest capture size
    max_capture_tokens: int

    @classmethod
    def build(cls, base: GpuCostModel, terms: ServedTerms, facts: EngineFacts, max_num_seqs: int,
              gpu: str, nvlink: bool, drafting: bool = False, decode_query_len: int = 1) -> ServedGpuCost:
        """drafting: a speculative draft's passes (vLLM's EagleProposer at 008603a runs each
        pass within the capture size from piecewise graphs, CUDAGraphMode.PIECEWISE), with
        no host time of their own: the target's step pays it. decode_query_len: tokens a
        decode runs (1 + k with speculation), which widens the capture sizes (engine.py)."""
        a = base.allreduce
        paths = facts.allreduce_paths(gpu, base.shapes.tensor_parallel, nvlink)
        allreduce = EngineAllReduce(a.table, a.latency_s, a.bandwidth, terms.custom_allreduce_scale,
                                    paths.custom_below, paths.symm_below if a.bandwidth > 0 else 0.0,
                                    paths.multimem, terms.symm_mem_efficiency)

        def form(graphs: str) -> GpuCostModel:
            p = terms.params(base.params, graphs)
            if drafting:
                p = replace(p, step_s=0.0, seq_s=0.0)
            return gpu_cost(base.shapes, p, base.mem_bandwidth, base.peak_flops, base.peak_flops_16, allreduce)
        piecewise = form("piecewise")
        return cls(piecewise if drafting else form("full"), piecewise, form("none"),
                   facts.max_capture_tokens(max_num_seqs, decode_query_len))

    def _form(self, f: StepFeatures) -> GpuCostModel:
        if f.prefill_tokens + f.decode_tokens > self.max_capture_tokens:
            return self.eager
        return self.graph if f.prefill_tokens == 0 else self.piecewise

    @property
    def window(self) -> int:
        return self.graph.window

    def step_time(self, f: StepFeatures) -> float:
        return self._form(f).step_time(f)

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        return self._form(f).decode_run_times(f, m)

    def at_speed(self, memory: float, compute: float | None = None) -> ServedGpuCost:
        return ServedGpuCost(self.graph.at_speed(memory, compute), self.piecewise.at_speed(memory, compute),
                             self.eager.at_speed(memory, compute), self.max_capture_tokens)
