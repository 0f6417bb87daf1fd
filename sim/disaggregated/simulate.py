"""Run a workload through a disaggregated deployment in simulated time."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import simpy

from batchlab.core.batch import StepObserver
from batchlab.core.kv_tiers.columns import tier_columns, tier_totals
from batchlab.core.pd_deployment import PDDeployment
from batchlab.core.pd_handoffs import HandOffLog, merged_run
from batchlab.core.result import RunResult
from batchlab.core.run_meta import Record, RunMeta
from batchlab.core.schedulers import check_prefix_hashes
from batchlab.core.sizes import check_run_size
from batchlab.core.workload import Workload
from batchlab.sim.disaggregated.world import DisaggregatedWorld
from batchlab.sim.events import run_to_end


@dataclass
class DisaggregatedResult:
    """The run as any run (every request's row; both pools' steps, replicas numbered
    prefill first) and the hand-offs between the pools."""
    result: RunResult
    handoffs: HandOffLog
    deployment: PDDeployment


def simulate_disaggregated(workload: Workload, deployment: PDDeployment,
                           meta: dict | Record | None = None, observer: StepObserver | None = None,
                           fast_forward: bool = True, record_steps: bool = True,
                           progress: Callable[[int], None] | None = None,
                           keep_on_interrupt: bool = False) -> DisaggregatedResult:
    """As sim.simulate, for a prefill pool and a decode pool (core/pd_deployment.py)."""
    dep = deployment
    for pool in (dep.prefill, dep.decode):
        check_prefix_hashes(pool.scheduler, workload)
        check_run_size(len(workload), pool.replicas, pool.scheduler.num_kv_blocks or pool.num_kv_blocks)
    env = simpy.Environment()
    world = DisaggregatedWorld(env, workload, dep, fast_forward, record_steps, observer, progress)
    interrupted = run_to_end(env, keep_on_interrupt)  # Ctrl-C may keep what was simulated
    world.unfinished()
    t = dep.transfer
    info = {"world": "sim", "policy": dep.decode.scheduler.policy,
            "replicas": dep.prefill.replicas + dep.decode.replicas,
            "router": f"{dep.prefill.router}/{dep.decode.router}",
            "num_kv_blocks": dep.decode.num_kv_blocks, "workload": workload.describe(),
            "interrupted": interrupted, "simulated_s": env.now,
            "prefill_replicas": dep.prefill.replicas, "decode_replicas": dep.decode.replicas,
            "prefill_policy": dep.prefill.scheduler.policy,
            "prefill_num_kv_blocks": dep.prefill.num_kv_blocks,
            "prefill_gpus_per_replica": dep.prefill.gpus_per_replica,
            "decode_gpus_per_replica": dep.decode.gpus_per_replica,
            "kv_link": t.link.name, "kv_link_source": t.link.source, "kv_link_lanes": t.lanes,
            "kv_bytes_per_token": t.bytes_per_token,
            **(meta.as_dict() if isinstance(meta, Record) else meta or {})}
    result = merged_run(world.rec, world.prefill_rec, world.decode_rec, RunMeta(**info))
    if world.homes:  # both pools' replicas each keep a tier (replica order: the step table's)
        result.meta.kv_tier = dep.decode.kv_tier.describe()
        result.totals.update(tier_totals(world.homes))
        if result.steps is not None:
            result.steps = tier_columns(result.steps, world.homes)
    return DisaggregatedResult(result, world.handoffs, dep)
