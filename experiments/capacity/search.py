"""The two capacity searches over experiments.capacity.point rows: the highest rate
scale a configuration carries, and the fewest replicas that carry a load. Each returns
every point it tried, so the answer comes with its evidence."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from batchlab.core.workload import WorkloadConfig
from batchlab.experiments.capacity.point import Criteria, evaluate
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.studies.slo_search import fewest, max_rate

REL_TOL = 0.02  # the max-rate band: [passing, failing] within 2% of the rate
ABS_TOL = 0.01  # in rate scale: 1% of the configured workload's rate


@dataclass
class Answer:
    kind: str  # "max-rate" | "replicas"
    label: str  # what was searched: policy, or model / TP / hardware
    value: float | None  # rate (req/s) or replicas; None: nothing met the criteria
    band: tuple[float, float] | None  # max-rate: [highest passing, lowest failing] req/s
    points: list[dict] = field(default_factory=list)
    error: str = ""  # a configuration that cannot run (a model that does not fit)
    stopped: str = ""  # why the search stopped early without an answer (rejections at any load)

    @property
    def best(self) -> dict | None:
        """The passing point at the answer, or, when none passed, the closest miss: the
        point with the most samples passing, then the best SLO attainment."""
        if not self.points:
            return None
        ok = [p for p in self.points if p["passes"]]
        if ok:
            key = (lambda p: p["rate"]) if self.kind == "max-rate" else (lambda p: -p["replicas"])
            return max(ok, key=key)
        return max(self.points, key=lambda p: (p["passing_samples"], _finite(p["slo_attainment"]),
                                               -_finite(p["p99_ttft_ms"], math.inf)))


    def next_cheaper(self) -> tuple[dict | None, str]:
        """The failing point next to the answer and its label: one replica fewer (the
        largest failing count below it), or the lowest failing rate above it."""
        if self.value is None:
            return None, ""
        failing = [p for p in self.points if not p["passes"]]
        if self.kind == "replicas":
            below = [p for p in failing if p["replicas"] < self.value]
            if not below:
                return None, ""
            p = max(below, key=lambda p: p["replicas"])
            return p, f"{p['replicas']} replica(s) ({p['gpus']} GPUs)"
        above = [p for p in failing if p["rate"] > self.value]
        if not above:
            return None, ""
        p = min(above, key=lambda p: p["rate"])
        return p, f"{p['rate']:.2f} req/s"


def _finite(x: float, default: float = -1.0) -> float:
    return x if isinstance(x, float) and math.isfinite(x) else default


class LoadIndependent(UserError):
    """A point fails on rejected requests alone: no rate or replica count changes that."""


def _stop_if_load_independent(row: dict, criteria: Criteria) -> None:
    if row.get("fails_whatever_the_load"):
        counted = row["rejected"] - (0 if criteria.count_too_long else row.get("too_long", 0))
        why = (("longer than the model's context, " if criteria.count_too_long else "longer than ")
               + "max_model_len or the token budget, or needing more KV blocks than the cache has")
        raise LoadIndependent(f"{counted} of {row['requests']} requests are rejected at any load "
                              f"({why}), so no load meets '{criteria.describe_lost()}': allow them with "
                              f"--max-rejected-share {_share_above(counted, row['requests'])}")


def _share_above(n: int, total: int) -> str:
    """n / total rounded up to two significant digits: the least round share that allows n."""
    share = n / total
    k = 1 - math.floor(math.log10(share))
    return f"{math.ceil(share * 10**k - 1e-9) / 10**k:g}"


def search_max_rate(cfg: ExperimentConfig, criteria: Criteria, samples: list[WorkloadConfig],
                    rel_tol: float = REL_TOL, max_evals: int = 30) -> Answer:
    """Bisection on the rate scale from 1 (the workload as configured)."""
    points: list[dict] = []
    base = cfg.workload.rate_scale

    def passes(scale: float) -> bool:
        c = cfg.model_copy(deep=True)
        c.workload.rate_scale = base * scale
        points.append(evaluate(c, criteria, samples))
        _stop_if_load_independent(points[-1], criteria)
        return points[-1]["passes"]

    label = cfg.policies()[0]
    try:
        found = max_rate(passes, start=1.0, abs_tol=ABS_TOL, rel_tol=rel_tol, max_evals=max_evals)
    except LoadIndependent as e:
        return Answer("max-rate", label, None, None, sorted(points, key=lambda p: p["rate_scale"]), stopped=str(e))
    except UserError as e:
        return Answer("max-rate", label, None, None, points, str(e))
    points.sort(key=lambda p: p["rate_scale"])
    rate_at = {p["rate_scale"]: p["rate"] for p in points}
    if found.rate == 0:
        return Answer("max-rate", label, None, None, points)
    lo = rate_at[base * found.rate]
    hi = rate_at.get(base * found.failing, math.inf)
    return Answer("max-rate", label, lo, (lo, hi), points)


def search_replicas(cfg: ExperimentConfig, criteria: Criteria, samples: list[WorkloadConfig],
                    max_replicas: int) -> Answer:
    points: list[dict] = []

    def passes(n: int) -> bool:
        c = cfg.model_copy(deep=True)
        c.run.replicas = n
        points.append(evaluate(c, criteria, samples))
        _stop_if_load_independent(points[-1], criteria)
        return points[-1]["passes"]

    label = f"{cfg.model.name} TP{cfg.hardware.tensor_parallel} {cfg.hardware.name}"
    try:
        found = fewest(passes, max_replicas)
    except LoadIndependent as e:
        return Answer("replicas", label, None, None, sorted(points, key=lambda p: p["replicas"]), stopped=str(e))
    except UserError as e:
        return Answer("replicas", label, None, None, points, str(e))
    points.sort(key=lambda p: p["replicas"])
    return Answer("replicas", label, found.count, None, points)
