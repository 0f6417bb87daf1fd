"""A cost form as the fit sees it: named positive parameters, a prior value for each, and
how a set of values becomes a price. The fit (fit.py) knows nothing else of the form, so a
GPU form (core/gpu_cost.py) plugs in with a space of its own.

The CPU form's space (core/fitted_cost.py FittedCostModel) fits the terms request timings
can reach: the fixed step cost, per sequence and per prefill chunk, weight streaming, the
matmul FLOP rate, KV reads and attention FLOPs. The context terms (after_prefill, after_idle,
steady, masked pairs, small_rows) and the serving loop's time between steps stay as the
prior has them: a client sees no step, so nothing tells them apart from the fixed cost."""
from __future__ import annotations

from dataclasses import dataclass, replace
from collections.abc import Callable

from batchlab.core.cost import CostModel
from batchlab.core.cost_at_speed import CostAtSpeed
from batchlab.core.fitted_cost import FittedCostModel
from batchlab.core.loop_time import Overhead

FITTED_FORM_TERMS = ("overhead_s", "per_seq_s", "per_chunk_s", "s_per_weight_byte", "s_per_flop",
                     "s_per_kv_byte", "s_per_attn_flop")


@dataclass(frozen=True)
class ParamSpace:
    names: tuple[str, ...]  # the parameters fitted
    prior: tuple[float, ...]  # their prior values, each > 0
    build: Callable[[dict[str, float]], CostModel]  # values by name -> the price simulated
    held: tuple[str, ...] = ()  # the form's other parameters, kept as the prior has them

    def __post_init__(self) -> None:
        if len(self.names) != len(self.prior) or any(not v > 0 for v in self.prior):
            raise ValueError("a parameter space needs one positive prior value per name")

    def priced(self, values: dict[str, float]) -> CostModel:
        return self.build({**dict(zip(self.names, self.prior)), **values})


def fitted_form_space(base: FittedCostModel, loop: Overhead | None,
                      terms: tuple[str, ...] = FITTED_FORM_TERMS) -> ParamSpace:
    """The CPU form around `base` (the prior). A term the prior prices at 0 cannot be
    scaled from it: it is held (at 0) and said so."""
    names = tuple(t for t in terms if getattr(base, t) > 0)
    zero = tuple(t for t in terms if t not in names)

    def build(values: dict[str, float]) -> CostModel:
        return CostAtSpeed(replace(base, **values), loop=loop)

    return ParamSpace(names, tuple(float(getattr(base, n)) for n in names), build, zero)
