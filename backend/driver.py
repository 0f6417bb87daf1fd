"""Replay a workload against the real backend on the wall clock: sim/engine.py's loop,
with time.perf_counter() for env.now and a torch forward for the cost model.

Requests are released when their arrival time (times `time_scale`) has passed since the
start; with max_concurrency (closed loop) a request is sent at max(its arrival, a slot
freed by a reply + think time), and its arrival is the send time, as in sim/simulate.py.
The same scheduler, the same MetricsRecorder calls, the same RunResult. Ctrl-C stops
after the current step and keeps everything that finished."""
from __future__ import annotations

import heapq
import math
import signal
import threading
import time
from typing import Callable

from tqdm import tqdm

from batchlab.backend.kv_tiers import HostSwap
from batchlab.backend.runtime import Runtime
from batchlab.backend.speculative.setup import check_backend_speculative
from batchlab.backend.step import run_step
from batchlab.core.batch import StepObserver
from batchlab.core.config import SchedulerConfig
from batchlab.core.features import StepHistory
from batchlab.core.kv_tiers import TierConfig
from batchlab.core.kv_tiers.columns import tier_columns, tier_totals
from batchlab.core.metrics import MetricsRecorder
from batchlab.core.request import Sequence, Status
from batchlab.core.result import RunResult
from batchlab.core.run_meta import RunMeta
from batchlab.core.schedulers import check_prefix_hashes, make_scheduler
from batchlab.core.speculative.config import SpeculativeConfig
from batchlab.core.workload import Workload

_SLEEP_SLICE = 0.05  # longest uninterrupted sleep: how fast Ctrl-C is noticed when idle


class _Stop:
    """First Ctrl-C: finish the current step, then stop. Second: abort at once."""

    def __init__(self, event: threading.Event | None) -> None:
        self.event = event or threading.Event()
        self._old = None

    def __enter__(self) -> "_Stop":
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        self.event.set()

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def _progress(total: int, enabled: bool):
    return tqdm(total=total, unit="req", desc="batchlab run", disable=not enabled,
                dynamic_ncols=True, mininterval=0.5)


def run_workload(runtime: Runtime, workload: Workload, scheduler: SchedulerConfig, *,
                 time_scale: float = 1.0, temperature: float = 0.0, seed: int = 0,
                 progress: bool = True, stop: threading.Event | None = None,
                 outputs: dict[int, list[int]] | None = None, warmup: bool = True,
                 meta: dict | None = None,
                 on_step: Callable[[int], None] | None = None,
                 observer: StepObserver | None = None, kv_tier: TierConfig | None = None,
                 recompute_seconds: Callable[[int], float] | None = None,
                 speculative: SpeculativeConfig | None = None) -> RunResult:
    """Serve `workload` with a fresh scheduler of `scheduler` on `runtime`.

    time_scale multiplies arrival times (0.5 replays twice as fast, 0 sends everything
    at once). outputs, when given, receives each finished request's token ids.
    on_step(step_index) is called after every step (tests use it to interrupt);
    observer(replica, start, duration, batch) too, as sim.simulate calls its own, after
    complete() and outside the timed region. kv_tier: swap preemption to host memory
    (backend/kv_tiers/; recompute_seconds prices a recompute for its 'cheapest' choice).
    speculative: draft and verify as it says (backend/speculative/; greedy only), what
    verification kept going to meta.speculative."""
    if not time_scale >= 0 or math.isinf(time_scale):
        raise ValueError(f"time_scale must be a finite number >= 0, got {time_scale}")
    check_prefix_hashes(scheduler, workload)
    drafts = speculative if speculative is not None and speculative.on else None
    if drafts is not None:
        check_backend_speculative(drafts, temperature)
    runtime.use_draft(drafts.draft_model if drafts is not None else None)  # its KV shares the pool
    num_blocks = runtime.pool_blocks(scheduler.num_kv_blocks, scheduler.block_size)
    sched = make_scheduler(scheduler, num_blocks)
    made = (sched.kv.num_blocks, scheduler.block_size, temperature, seed)
    engine = runtime.engine(*made) if drafts is None else runtime.engine(*made, speculative=drafts)
    if drafts is not None:
        sched.use_emission(engine.emission)
    # Only the target's pool swaps: a separate draft refeeds a swapped sequence (separate.py).
    home = HostSwap(kv_tier, engine.cache, recompute_seconds) if kv_tier else None
    if home:
        sched.use_kv_home(home)
    kv = sched.kv
    rec = MetricsRecorder()
    history = StepHistory()  # after_prefill / after_idle, as sim/engine.py
    n = len(workload)
    limit = workload.max_concurrency
    free_at = [0.0] * limit if limit else None  # closed loop: when each slot frees up
    released: list[Sequence] = []
    t_warm = time.perf_counter()
    if warmup:
        engine.warmup()
    warmup_s = time.perf_counter() - t_warm
    done_tokens = steps = 0
    idle_s = 0.0
    interrupted = False

    def send_time(i: int) -> float:
        t = float(workload.arrival[i]) * time_scale
        if free_at is not None:
            t = max(t, free_at[0]) if free_at else math.inf
        return t

    def finish(seqs: list[Sequence], now: float) -> None:
        nonlocal done_tokens
        for seq in seqs:
            engine.forget(seq)
            done_tokens += seq.num_generated
            if outputs is not None and seq.status is Status.FINISHED:
                outputs[seq.id] = list(seq.output_token_ids)
            if free_at is not None:
                heapq.heappush(free_at, now + workload.think_time_s)
        bar.update(len(seqs))

    t0 = time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - t0

    nxt = 0
    with _Stop(stop) as stopper, _progress(n, progress) as bar:
        last_post = 0.0
        while not stopper.event.is_set():
            now = clock()
            while nxt < n and (sent := send_time(nxt)) <= now:
                # The arrival is the send time, not this poll: a slot that came free
                # mid-step sent its request then, and it has queued since (as in sim).
                if free_at is not None:
                    heapq.heappop(free_at)
                seq = sched.add(workload.request(nxt, arrival=sent), now)
                released.append(seq)
                nxt += 1
                if seq.status is Status.REJECTED:
                    rec.record_requests([seq], 0)
                    finish([seq], now)
            if not sched.has_work() and nxt >= n:
                break
            batch = sched.schedule(now)
            if batch.is_empty:
                history.went_idle()
                wake = [t for t in (send_time(nxt) if nxt < n else math.inf,
                                    sched.next_wakeup(now)) if t is not None and t < math.inf]
                if not wake:  # nothing can ever run: leave it unfinished, do not hang
                    break
                nap = min(max(0.0, min(wake) - clock()), _SLEEP_SLICE)
                time.sleep(nap)
                idle_s += nap
                continue
            start, end, finished = run_step(sched, engine, batch, history, rec, clock)
            if observer is not None:
                observer(0, start, end - start, batch)
            steps += 1
            if finished:
                rec.record_requests(finished, 0)
                finish(finished, end)
            if progress and end - last_post > 0.5:
                gen = done_tokens + sum(s.num_generated for s in sched.running)
                bar.set_postfix_str(f"{gen / end:.0f} tok/s", refresh=False)
                last_post = end
            if on_step is not None:
                on_step(steps)
        interrupted = stopper.event.is_set()
    wall = clock()
    left = [*sched.running, *sched.waiting()]  # rows say they did not finish
    rec.record_requests(left, 0)
    st = engine.stats
    busy = st.prepare_s + st.forward_s
    overhead = max(0.0, wall - busy - idle_s)
    info = {
        "world": "real", "policy": scheduler.policy, "replicas": 1, "router": "round_robin",
        "num_kv_blocks": kv.num_blocks, "block_size": kv.block_size, "workload": workload.describe(),
        # every setting, so that a stored run can be simulated again (validate --real)
        "scheduler": scheduler.model_dump(mode="json"),
        **runtime.meta().as_dict(), "kv_pool_bytes": engine.cache.nbytes, "time_scale": time_scale,
        "temperature": temperature, "seed": seed, "warmup_s": round(warmup_s, 4),
        "wall_s": round(wall, 4), "steps": steps, "engine_prepare_s": round(st.prepare_s, 4),
        "engine_forward_s": round(st.forward_s, 4), "idle_s": round(idle_s, 4),
        # Time outside the engine while there was work: schedule, complete, metrics.
        "scheduler_overhead_s": round(overhead, 4),
        "scheduler_overhead_ms_per_step": round(1000 * overhead / steps, 4) if steps else 0.0,
        "requests_released": nxt, "interrupted": interrupted, **(meta or {}),
    }
    if sched.emission.stats():  # a speculative run: what verification kept
        info["speculative"] = sched.emission.stats()
    result = RunResult.from_recorder(rec, RunMeta(**info))
    if home:
        assert kv_tier is not None
        result.meta.kv_tier = kv_tier.describe()
        result.meta.kv_tier_bytes_copied = home.bytes_copied
        result.totals.update(tier_totals([home]))
        result.steps = tier_columns(result.steps, [home])
    return result
