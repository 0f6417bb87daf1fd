"""The one judgement of a validation, whatever the source of its real runs (sources.py).

Per cell (one request list under one scheduler setting, served once or more), the
identical request list is simulated with the profile under the real runs' settings and
KV pool: the headline, what `batchlab simulate --profile` predicts without ever seeing
the runs. Then once more per real run with a step table, at that run's machine speed as
the profile prices its steps (experiments/machine_speed.py, normalised.py), or with an
endpoint's speed probes, at the probes' level (probe_speed.py): the normalised variant,
the headline's error with the machine's speed taken out. Every judged number gets its
real values and spread, the simulated value, its error raw and normalised, and its
verdicts (verdicts.py).

Besides, what the source allows: live runs (served here, an endpoint) get the first real
run's step matching, first divergence and per-step duration error (with each step's
composition: served here), every run's machine speed with its drift and its contention,
KS and TOST per latency distribution (two real runs or more), and, over every cell,
the step-kind table. Runs with step tables (served here, stored) get the per-step test
(against the real runs' own spread) over every cell. Stored runs are judged on what they
keep, their summaries and step tables: the numbers and the per-step test, as `validate
--real` has always judged them.

Why these diagnostics and no others: they are what the fidelity study reports (errors
raw and normalised, spread, verdicts, KS/TOST, step kinds, the per-step test, each run's
speed, drift, contention and wall time, the per-step error over all real steps, the first
divergence)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from batchlab.core.cost.form import CostForm
from batchlab.core.cost.at_speed import CostAtSpeed
from batchlab.core.front_end import FrontEnd
from batchlab.core.cost.loop_time import Overhead
from batchlab.core.run_meta import MachineSpeed, RunMeta
from batchlab.experiments.machine_speed import machine_speed
from batchlab.experiments.run_labels import stability
from batchlab.experiments.validation.distributions import distribution_tests, undecidable
from batchlab.experiments.validation.divergence import explain
from batchlab.experiments.validation.normalised import normalised_cost
from batchlab.experiments.validation.metrics import POOL_NUMBERS
from batchlab.experiments.validation.pair import Run, run_sim
from batchlab.experiments.validation.per_step import per_step
from batchlab.experiments.validation.pools import simulate_pools
from batchlab.experiments.validation.probe_speed import PROBE, mean_tpot_s, probe_speed
from batchlab.experiments.validation.records import (CellDiagnostics, CellStability, JudgedCell, ProfileInfo,
                                                     RunConditions, RunSpeed, Validation)
from batchlab.experiments.validation.sources import RealSide
from batchlab.experiments.validation.speculative import drafted, emission, speculation
from batchlab.experiments.validation.step_kinds import kind_table
from batchlab.experiments.validation.steps import step_error, step_match
from batchlab.experiments.validation.verdicts import metric_rows, totals

HEADLINE, NORMALISED = "profile", "normalised"  # the simulations' cost_model in their meta


@dataclass
class Judged:
    """A cell judged, with the runs it was judged on (validate --out writes them)."""
    side: RealSide
    cell: JudgedCell
    headline: Run
    normalised: list[Run]  # one per real run (none without step tables)
    speeds: list[MachineSpeed]  # each real run's, as the profile prices its steps

    @property
    def runs_with_speed(self) -> list[tuple[dict, MachineSpeed]]:
        return [(r.steps, s) for r, s in zip(self.side.reals, self.speeds)]


@dataclass(frozen=True)
class Judge:
    """A profile, the yardstick: its step prices, its loop time between steps, where it came from."""
    cost: CostForm
    loop: Overhead | None
    profile: ProfileInfo
    front_end: FrontEnd | None = None  # simulated before the engine for client-timed runs

    @classmethod
    def of(cls, profile, info: ProfileInfo) -> "Judge":
        front = profile.front_end.model() if profile.front_end else None
        return cls(profile.cost_model(), profile.loop_overhead(), info, front)

    def cell(self, side: RealSide, sim_meta: dict | None = None) -> Judged:
        """Judge one cell. sim_meta: what the simulations' meta.json records besides."""
        front = self.front_end if side.client_timed else None
        tier = ({"kv_tier": side.kv_tier, "kv_bytes_per_token": side.kv_bytes_per_token}
                if side.kv_tier else {})
        metas = [r.meta for r in side.reals]
        cost = drafted(self.cost, speculation(metas))  # the profile, plus a draft as the runs had

        def simulated(priced, label: str) -> Run:
            meta = {**(sim_meta or {}), "cost_model": label}
            if side.pools is not None:  # served as a prefill and a decode engine: that deployment
                return simulate_pools(side.workload, side.scheduler, priced, side.pools, meta)
            return run_sim(side.workload, side.scheduler, priced, meta, front, emission(metas), **tier)

        sim = simulated(CostAtSpeed(cost, loop=self.loop), HEADLINE)
        probe_tpot = (mean_tpot_s(run_sim(PROBE, side.scheduler, CostAtSpeed(cost, loop=self.loop), None,
                                          front).result)
                      if any(r.probe for r in side.reals) else math.nan)
        speeds = [probe_speed(r.probe, probe_tpot, self.profile.describe) if r.steps is None and r.probe
                  else machine_speed(r.steps, cost, self.profile.describe) for r in side.reals]
        normalised = [simulated(normalised_cost(cost, s, self.loop), NORMALISED)
                      for s in speeds] if side.normalisable else []
        for run in normalised:
            stability(run.result)
        real_verdicts = [r.verdict for r in side.reals]
        sim_verdict = stability(sim.result).verdict
        flagged = sim_verdict == "overloaded" or "overloaded" in real_verdicts
        rows = metric_rows([r.summary for r in side.reals], sim.summary(),
                           [n.summary() for n in normalised] if side.normalisable else None, flagged,
                           POOL_NUMBERS if side.pools is not None else ())
        cell = JudgedCell(where=side.where, policy=side.scheduler.policy, runs=len(side.reals),
                          stability=CellStability(real=real_verdicts, sim=sim_verdict),
                          machine_speed=[RunSpeed(factor=s.factor, compute_factor=s.compute_factor) for s in speeds],
                          metrics=rows, totals=totals(rows))
        judged = Judged(side, cell, sim, normalised, speeds)
        if side.live:
            cell.diagnostics = self._diagnostics(judged)
        return judged

    def _diagnostics(self, j: Judged) -> CellDiagnostics:
        reals, first = j.side.reals, j.side.reals[0]
        d = CellDiagnostics(workload=j.side.workload.describe(), runs=[conditions(r.meta) for r in reals],
                            speeds=[s for r, s in zip(reals, j.speeds) if r.steps is not None or r.probe])
        if first.keys is not None:
            d.steps = step_match(first.keys, j.headline.keys)
            d.divergence = explain(first.result, j.headline.result, first.keys, j.headline.keys,
                                   d.steps.first_divergence)
        if first.steps is not None:  # each step priced as its run ran it (with a draft's passes)
            d.step_error = step_error(first.steps, drafted(self.cost, speculation([r.meta for r in reals])))
        if len(reals) >= 2:
            d.distributions = distribution_tests([r.result for r in reals], j.headline.result)
        d.undecidable = undecidable(j.cell.metrics, d.distributions)
        return d

    def report(self, judged: list[Judged], apart: list[tuple[dict, dict]] = ()) -> Validation:
        """Every cell together: the totals over their numbers, the per-step test over their
        runs with step tables (apart: stored.same_work_apart), the step kinds of live runs."""
        # Each run's steps priced as it ran them: the profile, plus a draft's passes where it drafted.
        priced = [drafted(self.cost, speculation([r.meta for r in j.side.reals])) for j in judged]
        stepped = [i for i, j in enumerate(judged) if j.side.with_steps]
        with_steps = [judged[i].runs_with_speed for i in stepped]
        live = [(run, priced[i]) for i in stepped if judged[i].side.live for run in judged[i].runs_with_speed]
        cells = [j.cell for j in judged]
        return Validation(profile=self.profile, cells=cells, totals=totals([m for c in cells for m in c.metrics]),
                          per_step=per_step(with_steps, self.cost, apart, [priced[i] for i in stepped])
                          if with_steps else None,
                          step_kinds=kind_table([r for r, _ in live], self.cost, [c for _, c in live])
                          if live else None)


def conditions(meta: RunMeta) -> RunConditions:
    return RunConditions(model=meta.model, device=meta.device, threads=meta.threads, wall_s=meta.wall_s,
                         cpu_share=meta.cpu_share, others_cpu=meta.others_cpu, steal_cpu=meta.steal_cpu,
                         loadavg_1min=meta.loadavg_1min, failed=meta.failed)
