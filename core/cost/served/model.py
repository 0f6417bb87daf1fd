"""A step priced as a served engine runs it (engine.py's facts, terms.py's constants): a
decode batch within the largest capture size from a full CUDA graph, a prefill or mixed
batch within it from piecewise graphs, anything larger eagerly; the engine's all-reduce
by message size (allreduce.py); with async scheduling, the host time hidden behind the
GPU's step up to its length (host.py).

The default price for dense models: compiled (batchlab/_compiled.py HOT), and each dense
form priced through its flattened step (core/cost/gpu_step.py), to the same bits."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from batchlab.core.cost.deployed_step import DeployedStep
from batchlab.core.cost.dispatch import gpu_cost
from batchlab.core.cost.form import SHORT_STEPS, FormDefaults, stretch_times, window_stretch_times
from batchlab.core.cost.gpu_form import GpuCostModel
from batchlab.core.cost.gpu_step import DenseGpuStep
from batchlab.core.cost.operator_shapes import OperatorShapes
from batchlab.core.cost.served.allreduce import EngineAllReduce
from batchlab.core.cost.served.engine import EngineFacts
from batchlab.core.cost.served.formats import WeightFormats
from batchlab.core.cost.served.host import overlapped
from batchlab.core.cost.served.terms import ServedTerms
from batchlab.core.features import StepFeatures
from batchlab.core.run_clock import RunClock


BF16 = WeightFormats()


def flattened(form: GpuCostModel) -> DenseGpuStep | None:
    """The flattened step of a dense form; None for one that prices more (a subclass:
    core/cost/gpu_deployment.py: deployed_step)."""
    return DenseGpuStep.of(form) if type(form) is GpuCostModel else None


def experts_at_rate(base: GpuCostModel, terms: ServedTerms, formats: WeightFormats) -> OperatorShapes:
    """base's shapes, the routed experts' FLOPs a token scaled so that, at the dense GEMMs'
    served efficiency, they run at the fused-MoE kernel's (the form has one compute rate)."""
    s = base.shapes
    if not s.experts.experts:
        return s
    dense = terms.gemm_efficiency(base.params, formats.dense)
    experts = terms.expert_efficiency(base.params, formats.experts, base.peak_flops_16 / base.peak_flops)
    flops = s.experts.expert_flops_per_token * dense / experts
    return replace(s, experts=s.experts._replace(expert_flops_per_token=flops))


def deployed_step(form: GpuCostModel) -> DeployedStep | None:
    """The compiled step of a deployed form of one stage; None otherwise (asked itself)."""
    return DeployedStep.of(form) if type(form) is not GpuCostModel and hasattr(form, "fixed") else None


@dataclass(frozen=True, slots=True)
class ServedGpuCost(FormDefaults):
    graph: GpuCostModel  # a decode batch from a full graph
    piecewise: GpuCostModel  # a prefill or mixed batch from piecewise graphs
    eager: GpuCostModel  # past the largest capture size
    max_capture_tokens: int
    host_overlap: float = 0.0  # host.py: the share of the host time the GPU's step hides (async scheduling)
    # each form's flattened step (derived)
    graph_step: DenseGpuStep | None = field(default=None, init=False, repr=False, compare=False)
    piecewise_step: DenseGpuStep | None = field(default=None, init=False, repr=False, compare=False)
    eager_step: DenseGpuStep | None = field(default=None, init=False, repr=False, compare=False)
    # a deployed form's compiled step (derived; None for dense forms and PP)
    graph_deployed: DeployedStep | None = field(default=None, init=False, repr=False, compare=False)
    piecewise_deployed: DeployedStep | None = field(default=None, init=False, repr=False, compare=False)
    eager_deployed: DeployedStep | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "graph_step", flattened(self.graph))
        object.__setattr__(self, "piecewise_step", flattened(self.piecewise))
        object.__setattr__(self, "eager_step", flattened(self.eager))
        object.__setattr__(self, "graph_deployed", deployed_step(self.graph))
        object.__setattr__(self, "piecewise_deployed", deployed_step(self.piecewise))
        object.__setattr__(self, "eager_deployed", deployed_step(self.eager))

    def __reduce__(self) -> tuple:
        """Pickled (a process pool, Dask) as its forms: the flattened steps are made again."""
        return ServedGpuCost, (self.graph, self.piecewise, self.eager, self.max_capture_tokens, self.host_overlap)

    @classmethod
    def build(cls, base: GpuCostModel, terms: ServedTerms, facts: EngineFacts, max_num_seqs: int,
              gpu: str, nvlink: bool, drafting: bool = False, decode_query_len: int = 1,
              formats: WeightFormats = BF16) -> ServedGpuCost:
        """drafting: a speculative draft's passes (vLLM's EagleProposer at 008603a runs each
        pass within the capture size from piecewise graphs, CUDAGraphMode.PIECEWISE), with
        no host time of their own: the target's step pays it. decode_query_len: tokens a
        decode runs (1 + k with speculation), which widens the capture sizes (engine.py).
        formats: the weight formats of the model's GEMMs, each at its rate (formats.py)."""
        a = base.allreduce
        paths = facts.allreduce_paths(gpu, base.shapes.tensor_parallel, nvlink)
        allreduce = EngineAllReduce(a.table, a.latency_s, a.bandwidth, terms.custom_allreduce_scale,
                                    paths.custom_below, paths.symm_below if a.bandwidth > 0 else 0.0,
                                    paths.multimem, terms.symm_mem_efficiency)

        shapes = experts_at_rate(base, terms, formats)

        def form(graphs: str) -> GpuCostModel:
            p = terms.params(base.params, graphs, formats.dense)
            if drafting:
                p = replace(p, step_s=0.0, seq_s=0.0)
            return gpu_cost(shapes, p, base.mem_bandwidth, base.peak_flops, base.peak_flops_16, allreduce)
        piecewise = form("piecewise")
        return cls(piecewise if drafting else form("full"), piecewise, form("none"),
                   facts.max_capture_tokens(max_num_seqs, decode_query_len), terms.host_overlap)

    def _form(self, f: StepFeatures) -> GpuCostModel:
        if f.prefill_tokens + f.decode_tokens > self.max_capture_tokens:
            return self.eager
        return self.graph if f.prefill_tokens == 0 else self.piecewise

    def _step(self, f: StepFeatures) -> DenseGpuStep | None:
        """_form's flattened step (None: ask _form)."""
        if f.prefill_tokens + f.decode_tokens > self.max_capture_tokens:
            return self.eager_step
        return self.graph_step if f.prefill_tokens == 0 else self.piecewise_step

    @property
    def window(self) -> int:
        return self.graph.window

    def _host(self, form: GpuCostModel, num_seqs: int) -> float:
        """The engine's own seconds in a step of this form (its step_s and seq_s)."""
        return form.params.step_s + form.params.seq_s * num_seqs

    def _deployed(self, f: StepFeatures) -> DeployedStep | None:
        if f.prefill_tokens + f.decode_tokens > self.max_capture_tokens:
            return self.eager_deployed
        return self.graph_deployed if f.prefill_tokens == 0 else self.piecewise_deployed

    def step_time(self, f: StepFeatures) -> float:
        step = self._step(f)
        if step is not None:
            t = step.step_time(f)
        else:
            deployed = self._deployed(f)
            t = deployed.step_time(f) if deployed is not None else self._form(f).step_time(f)
        return overlapped(t, self._host(self._form(f), f.num_seqs), self.host_overlap) if self.host_overlap else t

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        step = self._step(f)
        t = step.decode_run_times(f, m) if step is not None else self._form(f).decode_run_times(f, m)
        if not self.host_overlap:
            return t
        host = self._host(self._form(f), f.num_seqs)
        return t - self.host_overlap * np.minimum(host, t - host)

    def decode_times(self, n: int, kv0: int, m: int) -> list[float]:
        step = self.eager_step if n > self.max_capture_tokens else self.graph_step
        if self.host_overlap:  # stretch_times asks step_time, which hides the host time
            return stretch_times(self, n, kv0, m)
        if step is not None:
            return step.decode_times(n, kv0, m)
        eager = n > self.max_capture_tokens
        deployed = self.eager_deployed if eager else self.graph_deployed
        if deployed is not None and not deployed.windowed:
            return deployed.decode_times(n, kv0, m)
        if deployed is not None:  # windowed: as FormDefaults (DeployedGpuCost.decode_times)
            if m < SHORT_STEPS:  # there step_time's, of features without windowed reads
                return deployed.window_decode_times(n, kv0, 0, 0, m)
            return stretch_times(self, n, kv0, m)
        return (self.eager if eager else self.graph).decode_times(n, kv0, m)

    def decode_into(self, clock: RunClock, n: int, kv0: int, m: int) -> None:
        """decode_times onto a run's clock: a flattened or deployed step's line there."""
        if not self.host_overlap:
            eager = n > self.max_capture_tokens
            step = self.eager_step if eager else self.graph_step
            if step is not None:
                step.decode_into(clock, n, kv0, m)
                return
            deployed = self.eager_deployed if eager else self.graph_deployed
            if deployed is not None and not deployed.windowed:
                deployed.decode_into(clock, n, kv0, m)
                return
        clock.extend(self.decode_times(n, kv0, m))

    def decode_reads_context(self) -> bool:
        """Not where every decode is a flattened step's line: step_time of a decode-only
        step, whatever its context, is decode_into's value for it, bit for bit."""
        return bool(self.host_overlap) or self.graph_step is None or self.eager_step is None

    def window_decode_times(self, n: int, kv0: int, w0: int, u: int, m: int) -> list[float]:
        """A windowed model's forms are not flattened (core/cost/gpu_deployment.py): ask
        the one step_time asks for n decodes."""
        eager = n > self.max_capture_tokens
        if self.host_overlap or (self.eager_step if eager else self.graph_step) is not None:
            return window_stretch_times(self, n, kv0, w0, u, m)  # step_time hides the host time
        deployed = self.eager_deployed if eager else self.graph_deployed
        if deployed is not None:
            return deployed.window_decode_times(n, kv0, w0, u, m)
        return (self.eager if eager else self.graph).window_decode_times(n, kv0, w0, u, m)

    def at_speed(self, memory: float, compute: float | None = None) -> ServedGpuCost:
        return ServedGpuCost(self.graph.at_speed(memory, compute), self.piecewise.at_speed(memory, compute),
                             self.eager.at_speed(memory, compute), self.max_capture_tokens, self.host_overlap)

