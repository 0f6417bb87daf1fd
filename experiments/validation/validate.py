"""A validation: one real run, the simulator on the identical request list, and the
comparison of the two (metrics table, step matching, divergence, overhead).

Four simulated variants (variants.py). `profile`, the calibrated cost model alone, is
what `batchlab simulate` with that profile would predict without ever seeing this run:
it is the headline. The others take one or more figures from the real run itself, so
they are diagnostics, not predictions: `profile+overhead` adds the time the real run
spent between steps (scheduling, metrics, Python), `speed-scaled` also scales the
profile to the machine's speed during the run (one factor), `self-fit` replaces the
profile by a linear model fitted to the run's own steps. What each gains over the
headline says where the error comes from: unmodelled overhead, the machine's speed level
(drift, other work on a shared machine), the shape of the cost model, or (what no
variant removes) the simulation's dynamics and the run's own noise."""
from __future__ import annotations

from dataclasses import dataclass, field

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost import CostModel
from batchlab.core.loop_time import Overhead
from batchlab.core.run_meta import Stability
from batchlab.core.workload import Workload
from batchlab.experiments import run_labels
from batchlab.experiments.validation import compare, divergence, repeats, steps
from batchlab.experiments.validation.overhead import outside_forward
from batchlab.experiments.validation.pair import Run, run_real, run_sim, sim_scheduler
from batchlab.experiments.validation.variants import normalised_cost, variant_costs

HEADLINE = "profile"


def compare_runs(real: Run, sim: Run, cost: CostModel) -> dict:
    """Everything that compares two runs of the same requests (any two: real vs sim, or
    real vs real for the spread). `cost` prices the per-step duration error."""
    overloaded = any(stability(r).verdict == "overloaded" for r in (real, sim))
    cells = compare.compare_summaries(real.result.summary(), sim.result.summary(), overloaded)
    match = steps.step_match(real.keys, sim.keys, real.result.steps, cost)
    return {
        "metrics": [c.as_dict() for c in cells],
        "misses": [f"{c.metric} {c.stat}" for c in compare.misses(cells)],
        "stability": {"real": stability(real).verdict, "sim": stability(sim).verdict},
        "worst_error": compare.worst(cells),
        "steps": match,
        "divergence": divergence.explain(real.result, sim.result, real.keys, sim.keys,
                                         match["first_divergence"]),
        "preemptions": {"real": divergence.preemptions(real.result),
                        "sim": divergence.preemptions(sim.result)},
    }


def stability(run: Run) -> Stability:
    """The run's stable/overloaded verdict (core/stability.py), kept in its meta."""
    return run_labels.stability(run.result)


def label_real(run: Run, cost: CostModel, source: str = "") -> Run:
    """Record, in a real run's meta, the machine's speed during it and its stability."""
    run_labels.label_real(run.result, cost, source)
    return run


@dataclass
class Validation:
    policy: str
    real: Run
    sims: dict[str, Run]
    cost: CostModel  # the profile's model
    overhead: Overhead
    speed_factor: dict[str, float]  # real step time / profile price: all, decode, prefill
    profile: dict = field(default_factory=dict)  # where the cost model came from
    again: list[Run] = field(default_factory=list)  # --repeats: the further real runs
    again_sims: list[Run] = field(default_factory=list)  # normalised to each of them

    @property
    def reals(self) -> list[Run]:
        return [self.real, *self.again]

    def comparison(self) -> dict:
        """The JSON-able report of this validation."""
        variants = {name: compare_runs(self.real, run, self.cost) for name, run in self.sims.items()}
        meta = self.real.result.meta
        return {
            "policy": self.policy, "headline": HEADLINE,
            "workload": meta.workload,
            "real": {k: getattr(meta, k) for k in ("model", "dtype", "device", "threads", "num_kv_blocks",
                                                   "block_size", "wall_s", "steps", "cpu_share",
                                                   "others_cpu", "steal_cpu", "loadavg_1min")},
            "profile": self.profile,
            "overhead_fit": self.overhead.as_dict(),
            "speed_factor": self.speed_factor,
            "outside_forward": outside_forward(self.real.result),
            "machine_speed": meta.machine_speed and meta.machine_speed.as_dict(),
            **variants[HEADLINE],
            "variants": variants,
            **({"repeats": repeats.analyse(self.reals, self.sims[HEADLINE],
                                           [self.sims["normalised"], *self.again_sims])}
               if self.again else {}),
        }


def simulate_variants(real: Run, workload: Workload, scheduler: SchedulerConfig,
                      cost: CostModel, meta: dict | None = None,
                      loop: Overhead | None = None) -> tuple[dict[str, Run], dict]:
    """The simulated runs of `real`'s requests, one per variant, and what the variants
    fitted on the real run (overhead, speed_factor, machine_speed). loop: the profile's
    time between steps (variants.variant_costs)."""
    sched = sim_scheduler(scheduler, real.result)
    costs, fitted = variant_costs(real.result, cost, loop)
    sims = {name: run_sim(workload, sched, c, {**(meta or {}), "cost_model": name})
            for name, c in costs.items()}
    for run in sims.values():
        stability(run)
    return sims, fitted


def normalised_sim(real: Run, workload: Workload, scheduler: SchedulerConfig, cost: CostModel,
                   meta: dict | None = None, loop: Overhead | None = None) -> Run:
    """The profile scaled to the machine's speed measured during `real`, simulated."""
    speed = real.result.meta.machine_speed
    run = run_sim(workload, sim_scheduler(scheduler, real.result), normalised_cost(cost, speed, loop),
                  {**(meta or {}), "cost_model": "normalised"})
    stability(run)
    return run


def validate(runtime, workload: Workload, scheduler: SchedulerConfig, cost: CostModel, *,
             seed: int = 0, progress: bool = False, profile: dict | None = None,
             repeats: int = 1, loop: Overhead | None = None) -> Validation:
    """Run `workload` for real with `scheduler` `repeats` times, then simulate it with
    `cost` (the variants against the first real run; normalised against each). `cost`
    prices steps; loop, the profile's time between steps, is added where it simulates."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    source = (profile or {}).get("describe", "")
    reals = []
    for _ in range(repeats):
        reals.append(label_real(run_real(runtime, workload, scheduler, seed=seed, progress=progress),
                                cost, source))
        if reals[-1].result.meta.interrupted:
            break  # Ctrl-C: the caller stops
    sims, fitted = simulate_variants(reals[0], workload, scheduler, cost, profile, loop)
    again_sims = [normalised_sim(r, workload, scheduler, cost, profile, loop) for r in reals[1:]]
    return Validation(scheduler.policy, reals[0], sims, cost, fitted["overhead"], fitted["speed_factor"],
                      profile or {}, reals[1:], again_sims)
