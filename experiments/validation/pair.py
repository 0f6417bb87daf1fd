"""One request list served in both worlds, each step's composition kept.

The real run is backend.driver.run_workload, unchanged: the runtime handed to it is
wrapped so that the engine it makes keeps a reference to every Batch it executes (an
append, inside the timed step but ~0.1 us; compositions are computed after the run).
The simulated run gets the same scheduler settings and the real run's KV pool (blocks
and block size), so memory pressure, admission and preemption are the same, and an
observer that keeps each Batch (which makes the simulator step one by one: identical
results to fast-forward, by design)."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from batchlab.core.batch import Batch
from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.form import CostModel
from batchlab.core.emission import Emission
from batchlab.core.front_end import FrontEnd
from batchlab.core.result import RunResult
from batchlab.core.speculative.config import SpeculativeConfig
from batchlab.core.workload import Workload
from batchlab.experiments.validation.steps import Composition, composition
from batchlab.sim import simulate


@dataclass
class Run:
    result: RunResult
    keys: list[Composition] = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # figures beside the run's summary (a pools' run: pools.py)

    def summary(self) -> dict:
        return {**self.result.summary(), **self.extra} if self.extra else self.result.summary()


class _KeepingEngine:
    def __init__(self, engine, batches: list[Batch]) -> None:
        self._engine, self._batches = engine, batches

    def execute(self, batch: Batch):
        self._batches.append(batch)
        return self._engine.execute(batch)

    def __getattr__(self, name: str):
        return getattr(self._engine, name)


class _KeepingRuntime:
    """A backend Runtime whose engines keep the batches they execute."""

    def __init__(self, runtime, batches: list[Batch]) -> None:
        self._runtime, self._batches = runtime, batches

    def engine(self, *args, **kwargs) -> _KeepingEngine:
        return _KeepingEngine(self._runtime.engine(*args, **kwargs), self._batches)

    def __getattr__(self, name: str):
        return getattr(self._runtime, name)


def _cpu_jiffies() -> tuple[float, float] | None:
    """(busy, steal) CPU seconds of the whole machine so far, from /proc/stat (Linux)."""
    try:
        with open("/proc/stat") as f:
            v = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal ...: busy excludes idle and iowait
    return (sum(v[:3]) + sum(v[5:7])) / hz, (v[7] if len(v) > 7 else 0.0) / hz


def run_real(runtime, workload: Workload, scheduler: SchedulerConfig, *, seed: int = 0,
             progress: bool = False, meta: dict | None = None,
             speculative: SpeculativeConfig | None = None, **tier) -> Run:
    """Serve `workload` on the backend at its arrival times (time scale 1), speculating
    as `speculative` says; tier: a KV tier's kv_tier and recompute_seconds (run_workload's)."""
    from batchlab.backend.driver import run_workload  # lazy: torch, only when a real run is asked for

    batches: list[Batch] = []
    load0, cpu0, mach0, t0 = os.getloadavg()[0], time.process_time(), _cpu_jiffies(), time.perf_counter()
    res = run_workload(_KeepingRuntime(runtime, batches), workload, scheduler, seed=seed,
                       progress=progress, meta=meta, speculative=speculative, **tier)
    # Contention, for the record: other processes that take the core away mid-step
    # (cpu_share, the CPU this process got over its busy time, falls below 1) or share
    # the memory bus and caches (others_cpu: CPUs' worth of work they did meanwhile).
    elapsed, mine = time.perf_counter() - t0, time.process_time() - cpu0
    m = res.meta
    busy = m.wall_s - m.idle_s
    m.cpu_share = round(mine / busy, 3) if busy > 0 else None
    m.loadavg_1min = [round(load0, 2), round(os.getloadavg()[0], 2)]
    mach1 = _cpu_jiffies()
    if mach0 and mach1 and elapsed > 0:
        m.others_cpu = round(max(0.0, mach1[0] - mach0[0] - mine) / elapsed, 3)
        m.steal_cpu = round((mach1[1] - mach0[1]) / elapsed, 3)
    return Run(res, [composition(b) for b in batches])


def sim_scheduler(scheduler: SchedulerConfig, real: RunResult) -> SchedulerConfig:
    """The real run's settings with its KV pool made explicit."""
    return scheduler.model_copy(update={"num_kv_blocks": int(real.meta.num_kv_blocks),
                                        "block_size": int(real.meta.block_size)})


def run_sim(workload: Workload, scheduler: SchedulerConfig, cost: CostModel,
            meta: dict | None = None, front_end: FrontEnd | None = None,
            emission: Emission | None = None, **tier) -> Run:
    """Simulate `workload` with `scheduler`, whose num_kv_blocks must be set (front_end:
    a server's front end before the engine, core/front_end.py; emission: drafts as the
    real runs did, experiments/validation/speculative.py; tier: simulate()'s kv_tier and
    kv_bytes_per_token)."""
    if scheduler.num_kv_blocks is None:
        raise ValueError("run_sim needs scheduler.num_kv_blocks (the real run's pool)")
    batches: list[Batch] = []
    res = simulate(workload, scheduler, cost, scheduler.num_kv_blocks, meta=meta,
                   observer=lambda _r, _s, _d, batch: batches.append(batch), front_end=front_end,
                   emission=emission, **tier)
    return Run(res, [composition(b) for b in batches])
