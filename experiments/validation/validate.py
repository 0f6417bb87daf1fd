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

from core.config import SchedulerConfig
from core.cost import CostModel
from core.workload import Workload
from experiments.validation import compare, divergence, steps
from experiments.validation.overhead import Overhead, outside_forward
from experiments.validation.pair import Run, run_real, run_sim, sim_scheduler
from experiments.validation.variants import variant_costs

HEADLINE = "profile"


def compare_runs(real: Run, sim: Run, cost: CostModel) -> dict:
    """Everything that compares two runs of the same requests (any two: real vs sim, or
    real vs real for the spread). `cost` prices the per-step duration error."""
    cells = compare.compare_summaries(real.result.summary(), sim.result.summary())
    match = steps.step_match(real.keys, sim.keys, real.result.steps, cost)
    return {
        "metrics": [c.as_dict() for c in cells],
        "misses": [f"{c.metric} {c.stat}" for c in compare.misses(cells)],
        "worst_error": compare.worst(cells),
        "steps": match,
        "divergence": divergence.explain(real.result, sim.result, real.keys, sim.keys,
                                         match["first_divergence"]),
        "preemptions": {"real": divergence.preemptions(real.result),
                        "sim": divergence.preemptions(sim.result)},
    }


@dataclass
class Validation:
    policy: str
    real: Run
    sims: dict[str, Run]
    cost: CostModel  # the profile's model
    overhead: Overhead
    speed_factor: dict[str, float]  # real step time / profile price: all, decode, prefill
    profile: dict = field(default_factory=dict)  # where the cost model came from

    def comparison(self) -> dict:
        """The JSON-able report of this validation."""
        variants = {name: compare_runs(self.real, run, self.cost) for name, run in self.sims.items()}
        meta = self.real.result.meta
        return {
            "policy": self.policy, "headline": HEADLINE,
            "workload": meta.get("workload", ""),
            "real": {k: meta.get(k) for k in ("model", "dtype", "device", "threads", "num_kv_blocks",
                                              "block_size", "wall_s", "steps", "cpu_share",
                                              "others_cpu", "steal_cpu", "loadavg_1min")},
            "profile": self.profile,
            "overhead_fit": self.overhead.as_dict(),
            "speed_factor": self.speed_factor,
            "outside_forward": outside_forward(self.real.result),
            **variants[HEADLINE],
            "variants": variants,
        }


def simulate_variants(real: Run, workload: Workload, scheduler: SchedulerConfig,
                      cost: CostModel, meta: dict | None = None) -> tuple[dict[str, Run], dict]:
    """The simulated runs of `real`'s requests, one per variant, and what the variants
    fitted on the real run (overhead, speed_factor)."""
    sched = sim_scheduler(scheduler, real.result)
    costs, fitted = variant_costs(real.result, cost)
    sims = {name: run_sim(workload, sched, c, {**(meta or {}), "cost_model": name})
            for name, c in costs.items()}
    return sims, fitted


def validate(runtime, workload: Workload, scheduler: SchedulerConfig, cost: CostModel, *,
             seed: int = 0, progress: bool = False, profile: dict | None = None) -> Validation:
    """Run `workload` for real with `scheduler`, then simulate it with `cost`."""
    real = run_real(runtime, workload, scheduler, seed=seed, progress=progress)
    sims, fitted = simulate_variants(real, workload, scheduler, cost, profile)
    return Validation(scheduler.policy, real, sims, cost, fitted["overhead"], fitted["speed_factor"],
                      profile or {})
