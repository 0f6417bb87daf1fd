"""Run a workload through replicas of one scheduler in simulated time."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import simpy

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.form import attention_window, CostModel
from batchlab.core.emission import Emission
from batchlab.core.front_end import FrontEnd
from batchlab.core.kv_tiers import TierConfig, TieredHome, lone_prefill_seconds
from batchlab.core.kv_tiers.columns import tier_columns, tier_totals
from batchlab.core.metrics import MetricsRecorder
from batchlab.core.request import Request, Sequence
from batchlab.core.result import RunResult
from batchlab.core.run_meta import Record, RunMeta
from batchlab.core.schedulers import check_prefix_hashes, make_scheduler
from batchlab.core.sizes import check_run_size
from batchlab.core.workload import Workload
from batchlab.sim.admission import AdmissionLag
from batchlab.sim.apart import run_apart, window_ends
from batchlab.sim.arrivals import Arrivals
from batchlab.sim.collector import long_lived
from batchlab.sim.events import run_to_end
from batchlab.sim.engine import Replica, StepObserver
from batchlab.sim.replica_loads import LoadBoard
from batchlab.sim.resumption import EventQueue
from batchlab.sim.router import STATE_READING, make_router


# False: a router that reads the replicas' state ends every replica's run at every
# arrival (the reference the tests hold runs priced ahead to: sim/pending_run.py).
PRICE_AHEAD = True
# False: round-robin replicas interleaved in time, not run one after another (sim/apart.py;
# the reference its runs must equal).
APART = True


def simulate(workload: Workload, scheduler: SchedulerConfig, cost: CostModel,
             num_kv_blocks: int, replicas: int = 1, router: str = "round_robin",
             meta: dict | Record | None = None, observer: StepObserver | None = None,
             fast_forward: bool = True, record_steps: bool = True,
             progress: Callable[[int], None] | None = None,
             keep_on_interrupt: bool = False, front_end: FrontEnd | None = None,
             emission: Emission | None = None, kv_tier: TierConfig | None = None,
             kv_bytes_per_token: float = 0.0, async_scheduling: bool = False) -> RunResult:
    """fast_forward=False steps every iteration; True advances over runs of identical
    decode steps in one decision, with identical results (see core/decode_group.py).
    progress(n) is told each time n more requests have left (finished or rejected).
    record_steps=False keeps step totals instead of the step table (result.steps is
    None) and inter-token gaps in a fixed-size histogram (0.005% resolution), so that a
    replay of millions of requests holds little more than their rows.
    keep_on_interrupt: on Ctrl-C, return what was simulated, with meta.interrupted
    (rows for the requests that arrived; those still running or waiting say so),
    instead of raising. meta: what the caller adds to the run's meta (the setup's
    assumptions), after the simulator's own keys. front_end: a server's front end before
    the engine (core/front_end.py); requests keep their send times as arrivals.
    emission: tokens a decode runs and keeps (core/emission.py; None: one), shared by the
    replicas; what it counted goes into meta.speculative. kv_tier: a tier below each
    replica's KV pool (core/kv_tiers/), sized and priced by kv_bytes_per_token (per GPU);
    its figures join the step table and the summary. async_scheduling: a request that comes
    while an engine is busy joins a step later (sim/admission.py; steps one by one)."""
    return run_world(workload, scheduler, cost, num_kv_blocks, replicas, router, meta, observer,
                     fast_forward, record_steps, progress, keep_on_interrupt, front_end, emission,
                     kv_tier, kv_bytes_per_token, async_scheduling).result()


@dataclass
class World:
    """What a simulation leaves: its recorder, its meta's fields, its replicas' KV tiers."""
    rec: MetricsRecorder
    info: dict
    homes: list[TieredHome]
    kv_tier: TierConfig | None

    def result(self) -> RunResult:
        result = RunResult.from_recorder(self.rec, RunMeta(**self.info), release=True)
        if self.homes:
            assert self.kv_tier is not None
            result.meta.kv_tier = self.kv_tier.describe()
            result.totals.update(tier_totals(self.homes))
            if result.steps is not None:
                result.steps = tier_columns(result.steps, self.homes)
        return result


def run_world(workload: Workload, scheduler: SchedulerConfig, cost: CostModel,
              num_kv_blocks: int, replicas: int = 1, router: str = "round_robin",
              meta: dict | Record | None = None, observer: StepObserver | None = None,
              fast_forward: bool = True, record_steps: bool = True,
              progress: Callable[[int], None] | None = None,
              keep_on_interrupt: bool = False, front_end: FrontEnd | None = None,
              emission: Emission | None = None, kv_tier: TierConfig | None = None,
              kv_bytes_per_token: float = 0.0, async_scheduling: bool = False) -> World:
    """simulate(), stopping short of the result (sim/replica_groups merges the
    recorders of groups of replicas run apart)."""
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    check_prefix_hashes(scheduler, workload)
    # Before anything is allocated: replicas of a huge pool can exhaust memory.
    check_run_size(len(workload), replicas, scheduler.num_kv_blocks or num_kv_blocks)
    env = simpy.Environment()
    rec = MetricsRecorder(record_steps)
    pick = make_router(router)
    engines: list[Replica] = []

    def submit(request: Request, now: float) -> None:
        pick(engines, request).submit(request, now)

    def on_done(seq: Sequence) -> None:
        arrivals.done(seq)
        if progress is not None:
            progress(1)

    arrivals = Arrivals(env, workload, submit, front_end)
    # Pulled open loop: the replicas' and arrivals' waits on a compiled queue of their own
    # (sim/resumption.py), where SimPy's queue is Python code an event.
    queue = EventQueue(env) if arrivals.pulled else None
    arrivals.queue = queue
    done = on_done if progress is not None else arrivals.done
    next_arrival = arrivals.next_time
    if arrivals.closed_loop and replicas > 1:
        # A reply on one replica can send a request to another at any moment.
        next_arrival = lambda: env.now  # noqa: E731
    window = attention_window(cost)

    def build(env: simpy.Environment, i: int, pulled: Arrivals | None, queue: EventQueue | None) -> Replica:
        sched = make_scheduler(scheduler, num_kv_blocks)
        if emission is not None:
            sched.use_emission(emission)
        upcoming = next_arrival if pulled is None or pulled is arrivals else pulled.next_time
        e = Replica(env, i, sched, cost, rec, done, upcoming if fast_forward and not async_scheduling else None,
                    observer, closed_loop=arrivals.closed_loop, window=window, pulled=pulled, queue=queue)
        if async_scheduling:
            e.lag = AdmissionLag()
        return e
    # Round robin: each replica run on its own, one after another (sim/apart.py; in windows
    # of time where Ctrl-C may stop the run and keep a span of it), where nothing watches
    # the steps in time order (an observer) or couples the replicas (one stream of draws,
    # KV tiers).
    apart = (APART and replicas > 1 and router == "round_robin" and arrivals.pulled
             and observer is None and emission is None and kv_tier is None)
    homes: list[TieredHome] = []
    interrupted = False
    with long_lived(replicas) as settled:  # the replicas out of the collector's walks (sim/collector.py)
        if apart:
            settled()
            ends = window_ends(workload, replicas) if keep_on_interrupt else []
            end, interrupted = run_apart(workload, replicas, build, ends, keep_on_interrupt)
        else:
            for i in range(replicas):
                engines.append(build(env, i, arrivals if arrivals.pulled else None, queue))
            if kv_tier:
                homes = [_tier(e, kv_tier, kv_bytes_per_token, scheduler.block_size, cost) for e in engines]
            if replicas > 1 and router == "round_robin" and arrivals.pulled:
                # Request i goes to replica i mod replicas, whatever their state: an arrival ends
                # the runs of, and wakes, only the replica it goes to.
                for e in engines:
                    e.route_every = replicas
                arrivals.deal_to(engines)  # what `pick` would choose, natively
            elif replicas > 1 and router in STATE_READING and arrivals.pulled and fast_forward \
                    and cost.at(0.0) is cost and PRICE_AHEAD:
                # The router reads the replicas' state at each arrival: it reads a run's without
                # ending it, and only the replica an arrival goes to is cut and woken
                # (sim/pending_run.py). Not where the price moves with the clock: a run is
                # priced at the level where it starts, so its steps would depend on its cuts.
                arrivals.pull_at_each_arrival()
                for e in engines:
                    e.lookahead = replicas
                if router == "least_loaded":  # kept up to date, not read off every replica
                    board = LoadBoard(env, [e.index for e in engines])
                    for pos, e in enumerate(engines):
                        e.board, e.board_pos = board, pos
                    pick = board.pick
            if replicas == 1:  # nothing to route: the engine's own method, not two calls through Python
                arrivals.submit = engines[0].submit
            settled()
            interrupted = run_to_end(env, keep_on_interrupt, queue)  # Ctrl-C may keep what was simulated
            end = env.now
    for e in engines:  # nothing should be left unless interrupted; rows say so
        e.record_left()
    info = {"world": "sim", "policy": scheduler.policy, "replicas": replicas, "router": router,
            "num_kv_blocks": num_kv_blocks, "workload": workload.describe(),
            "interrupted": interrupted, "simulated_s": end,
            **(meta.as_dict() if isinstance(meta, Record) else meta or {})}
    if emission is not None and emission.stats():
        info["speculative"] = emission.stats()
    return World(rec, info, homes, kv_tier)


def _tier(engine: Replica, tier: TierConfig, kv_bytes_per_token: float, block_size: int,
          cost: CostModel) -> TieredHome:
    """The replica's scheduler keeps its KV in a tier of its own, noted step by step."""
    home = TieredHome(tier, kv_bytes_per_token, block_size,
                      lone_prefill_seconds(cost) if tier.preemption == "cheapest" else None)
    engine.scheduler.use_kv_home(home)
    engine.step_note = home.note
    return home
