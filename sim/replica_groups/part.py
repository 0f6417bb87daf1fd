"""One group of replicas run on the requests dealt to it: its tables renumbered as the
whole run's (its request rows packed: rows.py), and the exact sums that merge.py adds."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from batchlab.core.class_summary import ClassFigures, figures_by
from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.form import CostModel
from batchlab.core.run_meta import Record
from batchlab.core.summary import SLO, StepSums
from batchlab.core.workload import Workload
from batchlab.sim.replica_groups.rows import PackedRows, pack
from batchlab.sim.replica_groups.split import global_ids
from batchlab.sim.simulate import run_world


@dataclass
class GroupRun:
    """A group's share of a run, in the whole run's request ids and replica indices."""
    group: range
    requests: PackedRows  # by request id
    steps: dict[str, np.ndarray] | None  # by replica, then time (None: not recorded)
    itl_gaps: np.ndarray | None  # with a step table: replica order, time order within
    itl_counts: np.ndarray | None
    gap_counts: np.ndarray | None  # without one: the gap histogram's buckets
    sums: StepSums
    info: dict  # the run's meta fields as this group saw them
    by_replica: dict[int, ClassFigures] | None = None  # its replicas' breakdown figures, if asked


def simulate_group(workload: Workload, replicas: int, group: range, scheduler: SchedulerConfig,
                   cost: CostModel, num_kv_blocks: int, meta: dict | Record | None = None,
                   fast_forward: bool = True, record_steps: bool = True,
                   keep_on_interrupt: bool = False, figures: bool = False,
                   slo: SLO | None = None, progress: Callable[[int], None] | None = None) -> GroupRun:
    """Replicas `group` of a round-robin run of `replicas`; workload: the requests dealt
    to them (split.group_workload). figures: also each of its replicas' breakdown figures
    under `slo` (core/class_summary.py), computed here, in the group's process, on its
    rows alone (a replica's rows in the run's table are the same rows, in the same order).
    progress: called with each batch of requests that leave (simulate's)."""
    world = run_world(workload, scheduler, cost, num_kv_blocks, len(group), "round_robin", meta,
                      fast_forward=fast_forward, record_steps=record_steps,
                      progress=progress, keep_on_interrupt=keep_on_interrupt)
    rec = world.rec
    hist = rec.gap_histogram()
    gaps, counts = (None, None) if hist is not None else rec.itl()
    steps = rec.step_table()
    requests = rec.request_table(release=True)
    sums = rec.step_sums()
    info = {**world.info, "replicas": replicas}
    del world, rec  # what the recorder still holds, before the tables travel
    requests["request_id"] = global_ids(requests["request_id"], replicas, group)
    if steps is not None:
        steps["replica"] += group.start
    by_replica = None
    if figures:
        by_replica = {group.start + r: f for r, f in figures_by(requests, "replica", slo).items()}
    return GroupRun(group, pack(requests), steps, gaps, counts, None if hist is None else hist.counts,
                    sums, info, by_replica)
