"""`batchlab validate` with a [deployment]: one request list served on the backend as a
prefill engine and a decode engine in one process (backend/disaggregated/pools.py: every
step timed, each pool on a timeline of its own, the prompt's KV really copied between
their pools) and simulated as the same 1:1 deployment (sim/disaggregated), then judged
as any cell (judge.py): TTFT from the prefill side, TPOT and ITL from the decode side,
errors beside the real runs' own spread (--repeats). Besides the judged numbers, the
hand-off's measured time against its price and the decode queue are reported.

The hand-off's price: the two engines share one device, so the KV crosses no network
link but a memory copy (staged off the prefill pool into a buffer, what a link would
carry); its link is that copy at the profile's measured copy bandwidth (read + write
counted, so bytes moved at half of it) plus a fixed cost a hand-off (the call and the
device's sync: measured at the start, or deployment.link_latency_us). The landing copy into the decode
pool runs inside the admitting decode step's time, as a swap-in does, unpriced."""
from __future__ import annotations

import math

import numpy as np

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.form import CostModel
from batchlab.core.kv_handoff import KVTransfer
from batchlab.core.model.links import LinkSpec
from batchlab.core.workload import Workload
from batchlab.experiments import run_labels
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.validation.pair import Run
from batchlab.experiments.validation.sources import PoolsSetup, RealRun, RealSide
from batchlab.sim.disaggregated import DisaggregatedResult, simulate_disaggregated
from batchlab.sim.disaggregated.summary import transfer_figures

def check_deployment(cfg: ExperimentConfig) -> None:
    """What validate's pools cannot serve, refused in one line before the model loads."""
    d = cfg.deployment
    assert d is not None
    for field, why in (("prefill_replicas", "one prefill engine"), ("decode_replicas", "one decode engine"),
                       ("prefill_tp", "one device"), ("decode_tp", "one device")):
        if getattr(d, field) != 1:
            raise UserError(f"deployment.{field} = {getattr(d, field)}: validate serves {why} in one process "
                            f"(1:1, TP 1); simulate explores other deployments")
    given = d.model_fields_set & {"link", "link_gbs"}
    if given:
        raise UserError(f"deployment.{sorted(given)[0]}: validate's hand-off is a copy in one process, priced "
                        f"by the profile's copy bandwidth, not a named link (link_latency_us sets its fixed cost)")
    if d.overlap != "none":
        raise UserError("deployment.overlap = 'layers': the backend stages a prompt's KV after its prefill "
                        "(overlap = none)")
    for table, on in (("kv_tier", cfg.kv_tier is not None), ("speculative", cfg.speculative.on)):
        if on:
            raise UserError(f"[{table}] with [deployment]: validate's pools are served without it (simulate "
                            f"takes it); leave one of them out")
    if cfg.workload.max_concurrency:
        raise UserError("workload.max_concurrency with [deployment]: validate's pools serve an open-loop "
                        "workload (arrival times)")


def copy_link(profile, runtime, block_size: int, latency_us: float | None = None) -> LinkSpec:
    """The in-process copy as a link: the profile's measured copy bandwidth, else one
    measured now on the runtime's device; its fixed cost a hand-off deployment.link_latency_us
    where given, else measured now (a profile has none): one block's staging less its bytes."""
    effective = getattr(profile, "effective", None)
    measured = getattr(effective, "measured_copy_bandwidth", None)
    source = "the profile's measured copy bandwidth"
    if not measured:
        from batchlab.calibration.sweep.timing import measure_roofline  # lazy: torch

        measured, source = measure_roofline(runtime.device, mib=64)["copy_bandwidth"], "a copy measured now"
    bandwidth = measured / 2
    if latency_us is not None:
        latency, said = latency_us * 1e-6, "deployment.link_latency_us"
    else:
        from batchlab.backend.disaggregated.handoff import staging_seconds  # lazy: torch

        one_block = runtime.meta().kv_bytes_per_token * block_size / bandwidth
        latency = max(0.0, staging_seconds(runtime.spec, runtime.dtype, runtime.device, block_size) - one_block)
        said = "one block's staging (cold) measured now, less its bytes"
    return LinkSpec(name="in-process copy", kind="memory copy", bandwidth=bandwidth, latency_s=latency,
                    source=f"{source}, {measured / 1e9:.3g} GB/s read + write: the KV staged at half of it; "
                           f"{latency * 1e6:.0f} us a hand-off: {said}")


def pool_figures(run: DisaggregatedResult) -> dict[str, float]:
    """The hand-off's figures and the decode queue of a run, either world's."""
    h = run.handoffs.table()
    wait = (h["admitted_s"] - h["arrived_s"]) * 1000
    wait = wait[np.isfinite(wait)]
    return {**transfer_figures(run), "mean_decode_queue_ms": float(wait.mean()) if len(wait) else math.nan}


def serve_pools_here(runtime, workload: Workload, scheduler: SchedulerConfig, cost: CostModel, source: str,
                     prefill_blocks: int, link: LinkSpec, *, repeats: int, seed: int, where: str) -> RealSide:
    """Serve `workload` on the pools `repeats` times (each run labelled with the machine's
    speed as `cost` prices its steps, and its stability)."""
    from batchlab.backend.disaggregated.pools import run_pools  # lazy: torch, only for a real run

    decode_blocks = runtime.pool_blocks(scheduler.num_kv_blocks, scheduler.block_size)
    sched = scheduler.model_copy(update={"num_kv_blocks": decode_blocks})
    setup = PoolsSetup(prefill_blocks, KVTransfer(link, int(runtime.meta().kv_bytes_per_token)))
    dep = setup.deployment(sched, cost)
    reals = []
    for _ in range(repeats):
        run = run_pools(runtime, workload, sched, prefill_blocks, decode_blocks, seed=seed, timed=True)
        res = run.result
        run_labels.label_real(res, cost, source)
        summary = {**res.summary(), **pool_figures(DisaggregatedResult(res, run.log, dep))}
        reals.append(RealRun(where, res.meta, summary, res.steps, res, None))
    return RealSide(where, workload, sched, reals, pools=setup)


def simulate_pools(workload: Workload, scheduler: SchedulerConfig, cost: CostModel, setup: PoolsSetup,
                   meta: dict) -> Run:
    """The same request list through the same deployment, simulated."""
    run = simulate_disaggregated(workload, setup.deployment(scheduler, cost), meta=meta)
    return Run(run.result, extra=pool_figures(run))
