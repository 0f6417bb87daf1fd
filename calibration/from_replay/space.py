"""A cost form as the fit sees it: named positive parameters, a prior value for each, and
how a set of values becomes a price. The fit (fit.py) knows nothing else of the form, so a
GPU form (core/cost/gpu_form.py) plugs in with a space of its own.

The fitted form's space (core/cost/fitted.py FittedCostModel) fits the terms request timings
can reach: the fixed step cost, per sequence and per prefill chunk, the first step after an
idle gap (a light workload's short prefills: fit.py holds it, and the chunk cost, at the
prior where the timings tell it only with others), weight streaming, the matmul FLOP rate,
KV reads and attention FLOPs. The other context terms (after_prefill, steady, masked pairs,
small_rows) and the serving loop's time between steps stay as the prior has them: a client
sees no step, so nothing tells them apart from the fixed cost.
A CPU profile priced by the GPU form (core/cost/cpu_form.py CpuFormModel) fits the same kinds of
term in its own constants (gpu_form_space): the step and per-sequence costs, the chunk
and after-idle costs, and the efficiencies of weight streaming, the GEMMs' FLOPs, KV reads and attention;
the ridge's sharpness and the context terms stay the prior's."""
from __future__ import annotations

from dataclasses import dataclass, replace
from collections.abc import Callable

from batchlab.core.cost.form import CostModel
from batchlab.core.cost.at_speed import CostAtSpeed
from batchlab.core.cost.cpu_form import cpu_form, CpuFormModel
from batchlab.core.cost.fitted import FittedCostModel
from batchlab.core.cost.loop_time import Overhead
from batchlab.core.model.spec import ModelSpec

FITTED_FORM_TERMS = ("overhead_s", "per_seq_s", "per_chunk_s", "after_idle_s", "s_per_weight_byte",
                     "s_per_flop", "s_per_kv_byte", "s_per_attn_flop")


@dataclass(frozen=True)
class ParamSpace:
    names: tuple[str, ...]  # the parameters fitted
    prior: tuple[float, ...]  # their prior values, each > 0
    build: Callable[[dict[str, float]], CostModel]  # values by name -> the price simulated
    form: Callable[[dict[str, float]], object]  # values -> the bare form (a profile's)
    held: tuple[str, ...] = ()  # the form's other parameters, kept as the prior has them

    def __post_init__(self) -> None:
        if len(self.names) != len(self.prior) or any(not v > 0 for v in self.prior):
            raise ValueError("a parameter space needs one positive prior value per name")

    def priced(self, values: dict[str, float]) -> CostModel:
        return self.build({**dict(zip(self.names, self.prior)), **values})

    def fitted(self, values: dict[str, float]):
        """The bare cost form at `values` (others: the prior's), as a profile stores it."""
        return self.form({**dict(zip(self.names, self.prior)),
                          **{k: v for k, v in values.items() if k in self.names}})


def fitted_form_space(base: FittedCostModel, loop: Overhead | None,
                      terms: tuple[str, ...] = FITTED_FORM_TERMS) -> ParamSpace:
    """The CPU form around `base` (the prior). A term the prior prices at 0 cannot be
    scaled from it: it is held (at 0) and said so."""
    names = tuple(t for t in terms if getattr(base, t) > 0)
    zero = tuple(t for t in terms if t not in names)

    def form(values: dict[str, float]) -> FittedCostModel:
        return replace(base, **values)

    def build(values: dict[str, float]) -> CostModel:
        return CostAtSpeed(form(values), loop=loop)

    return ParamSpace(names, tuple(float(getattr(base, n)) for n in names), build, form, held=zero)


GPU_FORM_TERMS = ("step_s", "seq_s", "chunk_s", "after_idle_s", "mem_efficiency", "compute_efficiency",
                  "attn_kv_efficiency", "attn_pair_efficiency")
EXTRA_TERMS = ("chunk_s", "after_idle_s")  # the CPU extras among them; the rest are the GPU form's constants


def gpu_form_space(base: CpuFormModel, spec: ModelSpec, loop: Overhead | None,
                   terms: tuple[str, ...] = GPU_FORM_TERMS) -> ParamSpace:
    """The GPU form of a CPU profile around `base` (the prior), over the machine's measured
    bandwidth and matmul rate as the prior has them; a term at 0 is held, as above."""
    def value(n: str) -> float:
        return float(getattr(base.extras if n in EXTRA_TERMS else base.params, n))

    names = tuple(t for t in terms if value(t) > 0)
    zero = tuple(t for t in terms if t not in names)

    def form(values: dict[str, float]) -> CpuFormModel:
        params = replace(base.params, **{k: v for k, v in values.items() if k not in EXTRA_TERMS})
        extras = replace(base.extras, **{k: v for k, v in values.items() if k in EXTRA_TERMS})
        return cpu_form(spec, params, base.gpu.mem_bandwidth, base.gpu.peak_flops, extras)

    def build(values: dict[str, float]) -> CostModel:
        return CostAtSpeed(form(values), loop=loop)

    return ParamSpace(names, tuple(value(n) for n in names), build, form, held=zero)


def prior_space(cost: object, spec: ModelSpec, loop: Overhead | None) -> ParamSpace:
    """The space of the form that prices a prior profile (its cost_model())."""
    if isinstance(cost, CpuFormModel):
        return gpu_form_space(cost, spec, loop)
    if isinstance(cost, FittedCostModel):
        return fitted_form_space(cost, loop)
    raise ValueError(f"calibrate --from-replay fits the CPU cost forms; the prior is priced by "
                     f"{type(cost).__name__}")
