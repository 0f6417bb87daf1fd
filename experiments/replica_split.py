"""`batchlab simulate --workers N` (or --dask): a round-robin run's replicas simulated in
groups on the executor's processes (sim/replica_groups), merged into the result one
process gives, bit for bit. Each task carries its group's requests (a Share: taken from
the workload only as it is sent), or names the workload its worker inherited (a forked
pool holding it: experiments/forked_pool.py), and the experiment, from which the worker
builds the same setup (prices are rebuilt, not pickled)."""
from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Callable

from batchlab.core.class_summary import ClassFigures
from batchlab.core.result import RunResult
from batchlab.core.workload import Workload
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.executor import held, inherited, run_all
from batchlab.experiments.process_memory import give_back_freed_memory, no_huge_page_advice
from batchlab.experiments.setup import SimSetup, sim_setup
from batchlab.sim.replica_groups import (GroupRun, Share, check_splittable, group_workload, merge,
                                         replica_groups, simulate_group)
from batchlab.sim.replica_groups.rows import spare_columns


@dataclass
class GroupTask:
    cfg: ExperimentConfig
    model_named: bool
    hardware_named: bool
    policy: str
    share: Share | None  # the requests dealt to the group (None: taken from the held workload)
    held: int | None  # the whole workload's key in the worker's inherited memory (executor.held)
    group: range
    fast_forward: bool
    record_steps: bool


def check_split(cfg: ExperimentConfig, setup: SimSetup, workload: Workload) -> None:
    """A one-line UserError where the replicas cannot run apart (before anything runs)."""
    try:
        check_splittable(cfg.run.router, workload, setup.front_end, setup.speculative is not None,
                         setup.kv_tier is not None)
    except ValueError as e:
        raise UserError(f"--workers/--dask: {e}; run with --workers 1") from None


def simulate_split(executor: Executor, workers: int, cfg: ExperimentConfig, named: tuple[bool, bool],
                   policy: str, workload: Workload, fast_forward: bool, record_steps: bool,
                   progress: Callable[[int], None]) -> tuple[RunResult, dict[int, ClassFigures]]:
    """The run of `policy` on `workload`, its replicas in `workers` groups, and each
    replica's breakdown figures (core/class_summary.py), which the groups' processes
    compute side by side, under the run's SLO, rather than the merged table's one."""
    groups = replica_groups(cfg.run.replicas, workers)
    key = held(executor, workload)
    shares = [Share(workload, cfg.run.replicas, g) for g in groups]
    sizes = [len(s) for s in shares]
    tasks = [GroupTask(cfg, *named, policy, None if key is not None else s, key, g, fast_forward, record_steps)
             for s, g in zip(shares, groups)]
    del shares
    spare: dict = {}
    others = len(tasks) > 1

    def done(i: int, part: GroupRun) -> None:
        progress(sizes[i])
        if others and not spare:  # the first back: the table's memory made while the others run
            spare.update(spare_columns(part.requests, len(workload)))

    # Ctrl-C: each group keeps what it simulated (run_group), as one process does.
    parts = run_all(executor, run_group, tasks, done, wait_out_ctrl_c=True)
    del tasks
    by_replica = {r: f for p in parts for r, f in (p.by_replica or {}).items()}
    return merge(parts, workload, spare), by_replica


def run_group(task: GroupTask) -> GroupRun:
    no_huge_page_advice()  # the group's tables are made fresh after its run, in this process
    setup = sim_setup(task.cfg, task.model_named, task.hardware_named)
    replicas = task.cfg.run.replicas
    requests = task.share.requests() if task.share is not None else \
        group_workload(inherited(task.held), replicas, task.group)
    part = simulate_group(requests, replicas, task.group, setup.schedulers[task.policy],
                          setup.cost, setup.blocks, meta=setup.meta, fast_forward=task.fast_forward,
                          record_steps=task.record_steps, keep_on_interrupt=True, figures=True,
                          slo=task.cfg.run.slo)
    del requests
    give_back_freed_memory()  # the simulation's, while the parent merges
    return part
