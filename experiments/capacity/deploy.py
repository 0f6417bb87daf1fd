"""`capacity deploy`'s search: for every deployment of the space (space.py), the fewest
replicas that meet the criteria, and the cheapest deployment overall, in GPUs or in
dollars per hour from the user's prices.

Bounded: deployments run cheapest per replica first, in batches of the executor's
width; each searches replicas only up to what would still beat the runner-up found so
far (a deployment whose one replica already costs more is pruned unsimulated), so the
work shrinks as good answers appear. Every option says why it was not searched."""
from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable

from batchlab.core.workload import WorkloadConfig
from batchlab.experiments.capacity.binding import constraints
from batchlab.experiments.capacity.point import Criteria
from batchlab.experiments.capacity.search import Answer, search_replicas
from batchlab.experiments.capacity.tier_options import tier_gib
from batchlab.experiments.capacity.space import DeploySpace, Deployment, configure, deployments, why_not
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.executor import run_all


@dataclass
class Option:
    dep: Deployment
    cfg: ExperimentConfig
    unit_cost: float  # one replica: its GPUs, or their price per hour
    answer: Answer | None = None  # None: not searched
    skipped: str = ""  # why not searched (cannot run; pruned)
    cap: int = 0  # the most replicas searched
    capped: bool = False  # cap below --max-replicas: what would still beat the runner-up

    @property
    def replicas(self) -> int | None:
        return None if self.answer is None or self.answer.value is None else int(self.answer.value)

    @property
    def cost(self) -> float:
        return math.inf if self.replicas is None else self.replicas * self.unit_cost

    @property
    def gpus(self) -> float:
        return math.inf if self.replicas is None else self.replicas * self.dep.gpus_per_replica

    def why_none(self) -> str:
        """Why this option has no answer ('' where it has one)."""
        if self.skipped:
            return self.skipped
        if self.answer is None or self.replicas is not None:
            return ""
        if self.answer.error:
            return self.answer.error
        if self.answer.stopped:
            return self.answer.stopped
        if self.capped:
            return f"no replica count up to {self.cap} (what would beat the runner-up) meets the criteria"
        return f"no replica count up to {self.cap} meets the criteria"


def unit_cost(dep: Deployment, prices: dict[str, float] | None) -> float:
    if prices is None:
        return float(dep.gpus_per_replica)
    return dep.gpus_per_replica * prices[dep.hardware]


def check_prices(space: DeploySpace, prices: dict[str, float] | None) -> None:
    missing = [g for g in space.gpus if prices is not None and g not in prices]
    if missing:
        raise UserError(f"--price: no price for {', '.join(missing)} (give --price {missing[0]}=USD_PER_GPU_HOUR "
                        f"for every GPU searched)")


def search_one(task: tuple) -> Answer:
    """One deployment's fewest replicas; top level so that a process pool can ship it."""
    cfg, criteria, samples, cap = task
    return search_replicas(cfg, criteria, samples, cap)


def ranked(options: list[Option], criteria: Criteria | None = None) -> list[Option]:
    """Options with an answer, cheapest first; among equals fewer GPUs, then no KV tier
    (it costs host memory), then (given the criteria) the most headroom on the tightest SLO (the most robust to a wrong
    assumption), then search order."""
    ok = [o for o in options if o.replicas is not None]
    return sorted(ok, key=lambda o: (o.cost, o.gpus, tier_gib(o.dep.kv_tier) is not None, -headroom(o, criteria),
                                     options.index(o)))


def headroom(o: Option, criteria: Criteria | None) -> float:
    if criteria is None or o.answer is None or o.answer.best is None:
        return 0.0
    slo = [c.headroom for c in constraints(o.answer.best, criteria) if c.unit == "ms" or c.name == "goodput"]
    slo = [h for h in slo if math.isfinite(h)]
    return min(slo) if slo else 0.0


def search_deployments(cfg: ExperimentConfig, criteria: Criteria, samples: list[WorkloadConfig],
                       space: DeploySpace, prices: dict[str, float] | None, max_replicas: int,
                       executor, width: int, on_done: Callable[[Option], None] = lambda o: None) -> list[Option]:
    options = [Option(d, configure(cfg, d), unit_cost(d, prices)) for d in deployments(space)]
    for o in options:
        o.skipped = why_not(o.dep)
        if o.skipped:
            on_done(o)
    todo = sorted((o for o in options if not o.skipped), key=lambda o: o.unit_cost)
    while todo:
        second = runner_up(ranked(options))
        bound = second.cost if second else math.inf  # what a new option must not exceed
        batch, todo = todo[:width], todo[width:]
        run = []
        for o in batch:
            o.cap = max_replicas if math.isinf(bound) else min(max_replicas, int(bound // o.unit_cost + 1e-9))
            o.capped = o.cap < max_replicas
            if o.cap < 1:
                o.skipped = "pruned: one replica costs more than the runner-up found"
                on_done(o)
            else:
                run.append(o)
        answers = run_all(executor, search_one, [(o.cfg, criteria, samples, o.cap) for o in run])
        for o, a in zip(run, answers):
            o.answer = a
            on_done(o)
    return options


def closeness(p: dict, criteria: Criteria) -> float:
    """How near a failing point came: its worst SLO headroom (a growing queue: -inf)."""
    if p.get("stability") != "stable":
        return -math.inf
    h = [c.headroom for c in constraints(p, criteria) if c.unit == "ms" or c.name == "goodput"]
    h = [x for x in h if math.isfinite(x)]
    return min(h) if h else -math.inf


def hardware_key(o: Option) -> tuple:
    """What a deployment buys and loads: model, GPU, parallel layout, dtype (seats and
    the token budget are flags of the same servers)."""
    return o.dep.model, o.dep.hardware, o.dep.tp, o.dep.pp, o.dep.ep, o.dep.dtype


def runner_up(best: list[Option]) -> Option | None:
    """The cheapest option that buys or loads something else than the winner (another
    GPU, model, layout or dtype); the winner's own seat and budget variants are in the
    table."""
    return next((o for o in best[1:] if hardware_key(o) != hardware_key(best[0])), None) if best else None


def next_cheaper(options: list[Option], winner: Option, criteria: Criteria) -> tuple[dict | None, str]:
    """The failing point that costs the most below the winner (of any deployment), the
    closest miss among equals: the next-cheaper option, and its label."""
    cheaper = [(p["replicas"] * o.unit_cost, closeness(p, criteria), o, p)
               for o in options if o.answer is not None for p in o.answer.points
               if not p["passes"] and p["replicas"] * o.unit_cost < winner.cost]
    if not cheaper:
        return None, ""
    _, _, o, p = max(cheaper, key=lambda c: (c[0], c[1]))  # the costliest, then the closest miss
    return p, f"{o.dep.label()} x {p['replicas']} ({p['replicas'] * o.dep.gpus_per_replica} GPUs)"
