"""A step priced as a served engine runs it (engine.py's facts, terms.py's constants): a
decode batch within the largest capture size from a full CUDA graph, a prefill or mixed
batch within it from piecewise graphs, anything larger eagerly; the engine's own
all-reduce below its size limit."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.core.cost.dispatch import gpu_cost
from batchlab.core.cost.form import FormDefaults
from batchlab.core.cost.gpu_form import AllReduce, GpuCostModel
from batchlab.core.cost.served.engine import EngineFacts
from batchlab.core.cost.served.terms import ServedTerms
from batchlab.core.features import StepFeatures


@dataclass(frozen=True, slots=True)
class EngineAllReduce(AllReduce):
    """The measured (NCCL) all-reduce, and the engine's own below its size limit, at
    `custom_scale` of NCCL's time for the same message."""
    custom_scale: float = 1.0
    custom_max_bytes: float = 0.0
    custom: bool = False  # the engine's own serves this GPU count and link

    def time(self, nbytes: float, gpus: int) -> float:
        t = AllReduce.time(self, nbytes, gpus)
        return t * self.custom_scale if self.custom and nbytes < self.custom_max_bytes else t


@dataclass(frozen=True, slots=True)
class ServedGpuCost(FormDefaults):
    graph: GpuCostModel  # a decode batch from a full graph
    piecewise: GpuCostModel  # a prefill or mixed batch from piecewise graphs
    eager: GpuCostModel  # past the largest capture size
    max_capture_tokens: int

    @classmethod
    def build(cls, base: GpuCostModel, terms: ServedTerms, facts: EngineFacts, max_num_seqs: int,
              nvlink: bool) -> ServedGpuCost:
        a = base.allreduce
        allreduce = EngineAllReduce(a.table, a.latency_s, a.bandwidth, terms.custom_allreduce_scale,
                                    facts.custom_allreduce_max_bytes,
                                    facts.custom_allreduce(base.shapes.tensor_parallel, nvlink))

        def form(graphs: str) -> GpuCostModel:
            return gpu_cost(base.shapes, terms.params(base.params, graphs), base.mem_bandwidth, base.peak_flops,
                            base.peak_flops_16, allreduce)
        return cls(form("full"), form("piecewise"), form("none"), facts.max_capture_tokens(max_num_seqs))

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
