"""Serve a workload on a prefill engine and a decode engine in one process, under the same
scheduler code as everything else. The prefill engine serves each request to its first
token (core/kv_handoff.py prefill_request); its prompt's KV is staged off the prefill
pool (a real copy: what the link carries) and the request queued on the decode engine
with that KV elsewhere; when the decode scheduler admits it (blocks for the prompt,
counted computed), the KV lands in those blocks, inside that step's time (as a swap-in
does, backend/kv_tiers/), and the decode engine runs on from the first token. Greedy
outputs equal an aggregated engine's.

One device runs both engines, one step at a time; each pool keeps a timeline of its own,
as if on its own device: a step starts at its pool's clock, no earlier than what it serves
arrived, and lasts what it measured (timed: the host's time around it, forming the step
and its bookkeeping after, goes on the clock too, as in a served engine's loop) or one
second (untimed: a schedule that does not depend on the machine, for exactness tests).
The engine whose clock is behind steps next (the prefill engine on a tie), so a decode
step never runs before a hand-off that arrives ahead of it. No wall-clock sleep: an idle
pool's clock jumps to its next arrival. Open-loop workloads only (arrival times). A hand-off is sent when its prefill step ends, once the link (one
transfer at a time, core/pd_handoffs.py) is free, and arrives after its staging copy's
measured time: TTFT is the prefill side's, TPOT and ITL the decode side's, as in
sim/disaggregated. The run's tables have the simulator's schema (replica 0 prefill,
1 decode) and its hand-offs the simulator's log."""
from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field
from typing import Callable

from batchlab.backend.disaggregated.handoff import StagedKV, land, stage
from batchlab.backend.device import synchronize
from batchlab.backend.engine import Engine
from batchlab.backend.kv_cache import PagedKVCache
from batchlab.backend.runtime import Runtime
from batchlab.core.batch import Batch, step_features
from batchlab.core.config import SchedulerConfig
from batchlab.core.features import StepHistory
from batchlab.core.kv_handoff import decode_sequence, prefill_request
from batchlab.core.metrics import MetricsRecorder
from batchlab.core.pd_handoffs import HandOffLog, LinkQueues, merged_run
from batchlab.core.request import Request, Sequence, Status
from batchlab.core.result import RunResult
from batchlab.core.run_meta import RunMeta
from batchlab.core.schedulers import check_prefix_hashes, make_scheduler
from batchlab.core.schedulers.base import Scheduler
from batchlab.core.workload import Workload

PREFILL, DECODE = 0, 1  # replica numbers in the tables (prefill first, as the simulator's)


@dataclass
class PoolsRun:
    outputs: dict[int, list[int]] = field(default_factory=dict)  # by request id
    handoffs: int = 0
    kv_bytes: int = 0  # staged bytes moved between the pools
    prefill_steps: int = 0
    decode_steps: int = 0
    decode_preemptions: int = 0
    rejected: list[int] = field(default_factory=list)
    result: RunResult | None = None  # every request's row, both pools' steps
    log: HandOffLog = field(default_factory=HandOffLog)
    land_s: float = 0.0  # the landing copies' time, inside the decode steps that admitted them


@dataclass
class _Side:
    """One pool: its engine, scheduler, step records and clock."""
    engine: Engine
    sched: Scheduler
    rec: MetricsRecorder
    index: int
    clock: float = 0.0
    history: StepHistory = field(default_factory=StepHistory)
    stuck: bool = False  # work it cannot schedule until something arrives

    def next_time(self, arrival: float) -> float:
        """When it can next step: now with work it can schedule, else at `arrival`."""
        return self.clock if self.sched.has_work() and not self.stuck else max(self.clock, arrival)


def _engine(runtime: Runtime, blocks: int, block_size: int, seed: int) -> Engine:
    cache = PagedKVCache(runtime.spec, blocks, block_size, runtime.dtype, runtime.device)
    return Engine(runtime.runner, cache, seed=seed, prompt_seed=seed)


def run_pools(runtime: Runtime, workload: Workload, scheduler: SchedulerConfig, prefill_blocks: int,
              decode_blocks: int, seed: int = 0, max_steps: int = 1_000_000, timed: bool = False,
              meta: dict | None = None) -> PoolsRun:
    check_prefix_hashes(scheduler, workload)
    if workload.max_concurrency:
        raise ValueError("the pools serve an open-loop workload (arrival times), not a closed loop")
    bs = scheduler.block_size
    pre = _Side(_engine(runtime, prefill_blocks, bs, seed), make_scheduler(scheduler, prefill_blocks),
                MetricsRecorder(), PREFILL)
    dec = _Side(_engine(runtime, decode_blocks, bs, seed), make_scheduler(scheduler, decode_blocks),
                MetricsRecorder(), DECODE)
    rows = MetricsRecorder()  # the client's rows
    out, link = PoolsRun(), LinkQueues(1, 1)
    staged: dict[int, StagedKV] = {}
    copy_s: dict[int, float] = {}  # staging seconds, by id
    in_flight: list[tuple[float, int, Sequence]] = []  # (arrives, id, the decode side's sequence)
    prefill_scheduled: dict[int, float] = {}
    originals: dict[int, Request] = {}
    n, nxt = len(workload), 0
    wall0 = time.perf_counter()

    def copy(fn) -> float:
        """Run a KV copy; its seconds (timed) or none."""
        t0 = time.perf_counter()
        fn()
        synchronize(runtime.device)
        return time.perf_counter() - t0 if timed else 0.0

    def staging(batch: Batch) -> None:  # prompts done: their KV off the pool before complete() frees it
        for seq in _sampling(batch):
            if originals[seq.id].output_len > 1:
                t = copy(lambda seq=seq: staged.__setitem__(
                    seq.id, stage(pre.engine.cache, seq.block_table, seq.request.prompt_len)))
                copy_s[seq.id] = t

    while True:
        if out.prefill_steps + out.decode_steps >= max_steps:
            raise RuntimeError(f"no end after {max_steps} steps")
        wake = pre.sched.next_wakeup(pre.clock) if pre.stuck else None
        p_next = pre.next_time(min(float(workload.arrival[nxt]) if nxt < n else math.inf,
                                   math.inf if wake is None else wake))
        d_next = dec.next_time(in_flight[0][0] if in_flight else math.inf)
        if p_next == math.inf and d_next == math.inf:
            break  # done, or work that nothing can ever schedule (left unfinished)
        turn = time.perf_counter()  # host time before the step (arrivals, schedule) is on the clock
        if p_next <= d_next:
            pre.clock = now = p_next
            while nxt < n and workload.arrival[nxt] <= now:
                request = workload.request(nxt)
                originals[request.id] = request
                nxt += 1
                pre.stuck = False
                reason = dec.sched.reject_reason(request)  # refused before its prefill runs
                seq = Sequence(request) if reason else pre.sched.add(prefill_request(request), now)
                if reason:
                    seq.status, seq.reject_reason, seq.finish = Status.REJECTED, reason, now
                if seq.status is Status.REJECTED:
                    rows.record_requests([seq], DECODE if reason else PREFILL)
                    out.rejected.append(request.id)
            batch = pre.sched.schedule(now)
            if batch.is_empty:
                pre.history.went_idle()
                pre.stuck = True
                continue
            pre.stuck = False
            finished, host = _step(pre, batch, timed, turn, after=staging)
            out.prefill_steps += 1
            end = pre.clock
            for seq in finished:
                request = originals.pop(seq.id)
                if request.output_len == 1 or seq.status is not Status.FINISHED:
                    staged.pop(seq.id, None)
                    rows.record_requests([seq], PREFILL)
                    if seq.status is Status.FINISHED:
                        out.outputs[seq.id] = list(seq.output_token_ids)
                else:
                    d = decode_sequence(seq, request)
                    d.output_token_ids = list(seq.output_token_ids)
                    sent, arrived = link.reserve(0, 0, end, copy_s.pop(seq.id))
                    nbytes = staged[seq.id].nbytes
                    out.log.add(seq.id, PREFILL, DECODE, end, sent, arrived, nbytes)
                    out.handoffs += 1
                    out.kv_bytes += nbytes
                    prefill_scheduled[seq.id] = seq.first_scheduled
                    heapq.heappush(in_flight, (arrived, seq.id, d))
                pre.engine.forget(seq)
            pre.clock += host()
        else:
            dec.clock = now = d_next
            while in_flight and in_flight[0][0] <= now:
                arrived, _, d = heapq.heappop(in_flight)
                dec.sched.add_sequence(d, arrived)
                dec.stuck = False
            batch = dec.sched.schedule(now)
            if batch.is_empty:
                dec.history.went_idle()
                dec.stuck = True
                continue
            dec.stuck = False

            def landing(batch=batch) -> None:  # admitted now: the KV lands in the blocks given
                for seq in batch.seqs:
                    kv = staged.pop(seq.id, None)
                    if kv is not None:
                        first = seq.cached_tokens // bs if dec.sched.prefix_caching else 0
                        out.land_s += copy(lambda: land(dec.engine.cache, kv, seq.block_table, first))
            finished, host = _step(dec, batch, timed, turn, before=landing)
            out.decode_steps += 1
            for seq in finished:
                if seq.first_scheduled >= 0:
                    out.log.admitted[seq.id] = seq.first_scheduled
                seq.first_scheduled = prefill_scheduled.pop(seq.id, seq.first_scheduled)
                rows.record_requests([seq], DECODE)
                if seq.status is Status.FINISHED:
                    out.outputs[seq.id] = list(seq.output_token_ids)
                dec.engine.forget(seq)
            dec.clock += host()
    for side in (pre, dec):  # what could not finish: rows that say so
        left = [*side.sched.running, *side.sched.waiting()]
        for seq in left if side is dec else ():
            seq.first_scheduled = prefill_scheduled.pop(seq.id, seq.first_scheduled)
        rows.record_requests(left, side.index)
    rows.record_requests([d for _, _, d in in_flight], DECODE)
    out.decode_preemptions = dec.sched.num_preemptions
    out.result = merged_run(rows, pre.rec, dec.rec, RunMeta(**_meta(
        runtime, workload, scheduler, pre, dec, out, time.perf_counter() - wall0, timed, seed, meta)))
    return out


def _step(side: _Side, batch: Batch, timed: bool, turn: float, before=None,
          after=None) -> tuple[list[Sequence], Callable[[], float]]:
    """One step of `side`, recorded as start..end: timed, the host time since
    `turn` (arrivals, schedule) before it and its copies and forward pass; untimed, one
    second. before/after: copies at its start (landing, inside its time) or after its
    forward pass (staging: on the link, off the clock). Returns the finished sequences
    and the host time since then, less the staging (the engine loop's bookkeeping after
    a step, which the pool's clock then adds, as a served engine's loop spends it)."""
    sched, kv = side.sched, side.sched.kv
    features = step_features(batch, *side.history.context(side.clock), window=side.engine.runner.window)
    kv_used, cached = kv.num_used, kv.num_cached
    t0 = time.perf_counter()
    start = side.clock + (t0 - turn if timed else 0.0)
    if before is not None:
        before()
    side.engine.execute(batch)
    t1 = time.perf_counter()
    end = start + (t1 - t0 if timed else 1.0)
    staging = 0.0
    if after is not None:
        after(batch)
        staging = time.perf_counter() - t1
    side.history.ran(end, features.num_prefill_seqs > 0)
    finished = sched.complete(batch, end)
    side.rec.record_step(side.index, start, end, batch, features, kv_used, kv.num_blocks, sched.max_seqs, cached)
    side.clock = end
    return finished, lambda: time.perf_counter() - t1 - staging if timed else 0.0


def _sampling(batch: Batch) -> list[Sequence]:
    """The batch's items that reached the end of their prompt (they sample this step)."""
    return [s for s, start, n in zip(batch.seqs, batch.starts, batch.num_tokens) if start + n == s.known]


def _meta(runtime: Runtime, workload: Workload, scheduler: SchedulerConfig, pre: _Side, dec: _Side,
          out: PoolsRun, wall: float, timed: bool, seed: int, meta: dict | None) -> dict:
    stats = [pre.engine.stats, dec.engine.stats]
    return {
        "world": "real", "policy": scheduler.policy, "replicas": 2, "router": "round_robin/round_robin",
        "num_kv_blocks": dec.sched.kv.num_blocks, "block_size": scheduler.block_size,
        "workload": workload.describe(), "scheduler": scheduler.model_dump(mode="json"),
        **runtime.meta().as_dict(), "kv_pool_bytes": pre.engine.cache.nbytes + dec.engine.cache.nbytes,
        "seed": seed, "wall_s": round(wall, 4), "steps": out.prefill_steps + out.decode_steps,
        "engine_prepare_s": round(sum(s.prepare_s for s in stats), 4),
        "engine_forward_s": round(sum(s.forward_s for s in stats), 4), "idle_s": 0.0,
        "interrupted": False, "prefill_replicas": 1, "decode_replicas": 1,
        "prefill_num_kv_blocks": pre.sched.kv.num_blocks,
        "kv_link": "in-process copy", "kv_land_s": round(out.land_s, 6),
        "timeline": "measured" if timed else "one second a step", **(meta or {})}
