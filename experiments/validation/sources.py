"""Where a validation's real runs come from. Every source yields a RealSide: the real runs
of one request list under one scheduler setting and KV pool, which judge.py judges the
same way whatever their source.

- served here (`serve_here`, below): the list served N times on the backend, each run
  with its step table and each step's composition (pair.py); with a [deployment], on a
  prefill and a decode engine (pools.py: steps and hand-offs, no compositions);
- an endpoint (endpoint.py): replays against a server, request timings only, each
  between two speed probes (probe_speed.py);
- stored runs (stored.py): N runs an earlier validation wrote, read back with their
  summaries and step tables, no compositions."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.form import CostModel
from batchlab.core.kv_handoff import KVTransfer
from batchlab.core.kv_tiers import TierConfig, lone_prefill_seconds
from batchlab.core.pd_deployment import PDDeployment, Pool
from batchlab.core.result import RunResult
from batchlab.core.run_meta import RunMeta
from batchlab.core.speculative.config import SpeculativeConfig
from batchlab.core.workload import Workload
from batchlab.experiments import run_labels
from batchlab.experiments.validation.pair import Run, run_real, sim_scheduler
from batchlab.experiments.validation.probe_speed import ProbeTimes
from batchlab.experiments.validation.speculative import drafted
from batchlab.experiments.validation.steps import Composition

SERVED_HERE = "served here"


@dataclass(frozen=True)
class PoolsSetup:
    """What the pools' cell needs beside a cell's scheduler: the prefill pool's blocks (the
    decode pool's are the scheduler's num_kv_blocks) and the hand-off's price."""
    prefill_blocks: int
    transfer: KVTransfer

    def deployment(self, scheduler: SchedulerConfig, cost: CostModel) -> PDDeployment:
        assert scheduler.num_kv_blocks is not None, "the decode pool's blocks (the real run's)"
        return PDDeployment(Pool(1, scheduler, cost, self.prefill_blocks),
                            Pool(1, scheduler, cost, scheduler.num_kv_blocks), self.transfer)


@dataclass
class RealRun:
    where: str
    meta: RunMeta
    summary: dict  # the run's summary; a stored one carries its stability verdict
    steps: dict[str, np.ndarray] | None  # None: the source sees no steps (an endpoint)
    result: RunResult | None = None  # a live run (served here, an endpoint): its tables
    keys: list[Composition] | None = None  # each step's composition (served here)
    probe: ProbeTimes | None = None  # an endpoint's speed probes around it (probe_speed.py)

    @property
    def verdict(self) -> str | None:
        """Its stable/overloaded verdict (judged once, kept in its meta), None where it
        cannot be judged: a client of an endpoint cannot see when a request was scheduled."""
        known = self.summary.get("stability") or (self.meta.stability and self.meta.stability.verdict)
        if known or self.result is None or "first_scheduled_s" in self.meta.unobserved:
            return known
        return run_labels.stability(self.result).verdict


@dataclass
class RealSide:
    """One request list under one scheduler setting, served for real (once or more)."""
    where: str  # the runs' folder, "served here", or the endpoint
    workload: Workload
    scheduler: SchedulerConfig  # with the real runs' KV pool (num_kv_blocks, block_size)
    reals: list[RealRun]
    # The runs' latencies are a client's (an endpoint replayed): from the send, through the
    # server's front end, which the simulation then puts before the engine where the
    # profile has one. False: the engine's own records (served here, stored runs).
    client_timed: bool = False
    # A KV tier the real runs swapped to (backend/kv_tiers/): the simulation gets it too,
    # sized by the real runs' KV bytes per token.
    kv_tier: TierConfig | None = None
    kv_bytes_per_token: float = 0.0
    # Served as a prefill and a decode engine (pools.py): simulated as that deployment.
    pools: PoolsSetup | None = None

    @property
    def live(self) -> bool:
        """Runs in memory (not read back from a folder): every diagnostic their source allows."""
        return all(r.result is not None for r in self.reals)

    @property
    def with_steps(self) -> bool:
        return all(r.steps is not None for r in self.reals)

    @property
    def normalisable(self) -> bool:
        """Every run's machine speed can be measured: from its steps, or an endpoint's probes."""
        return all(r.steps is not None or r.probe is not None for r in self.reals)


def live_run(run: Run, where: str) -> RealRun:
    res = run.result
    return RealRun(where, res.meta, res.summary(), res.steps, res, run.keys)


def serve_here(runtime, workload: Workload, scheduler: SchedulerConfig, cost: CostModel, source: str, *,
               repeats: int = 1, seed: int = 0, progress: bool = False, where: str = SERVED_HERE,
               kv_tier: TierConfig | None = None,
               speculative: SpeculativeConfig | None = None) -> RealSide:
    """Serve `workload` with `scheduler` `repeats` times, each run labelled in its meta with
    the machine's speed as `cost` (described by `source`) prices its steps, and its
    stability. Ctrl-C during a run: KeyboardInterrupt (a partial run has nothing to judge)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    runs = []
    for _ in range(repeats):
        run = run_real(runtime, workload, scheduler, seed=seed, progress=progress, speculative=speculative,
                       kv_tier=kv_tier, recompute_seconds=lone_prefill_seconds(cost) if kv_tier else None)
        if run.result.meta.interrupted:
            raise KeyboardInterrupt
        run_labels.label_real(run.result, drafted(cost, run.result.meta.speculative), source)
        runs.append(run)
    first = runs[0].result
    return RealSide(where, workload, sim_scheduler(scheduler, first), [live_run(r, where) for r in runs],
                    kv_tier=kv_tier, kv_bytes_per_token=float(first.meta.kv_bytes_per_token or 0.0))
