"""The engine thread of `batchlab serve`: backend/driver.py's loop, fed by HTTP requests
instead of a workload's arrival times.

The same scheduler, Engine, MetricsRecorder and RunResult as `batchlab run`. HTTP
handlers (another thread) hand requests and aborts over a queue; the loop takes them in
at the next step boundary, so the step in flight is never disturbed. Each sampled token
goes back to its request's `emit` callback, stamped with the step's end on the same
clock as the request table. torch releases the GIL inside a forward pass, so the HTTP
thread keeps serving while a step runs.

One request cannot take the server down: a request whose sampling fails fails alone
(its row says `failed` and why, its client gets the error), and a step that fails
fails the requests in it and the loop goes on; only MAX_FAILED_STEPS failed steps in a
row (a broken engine, not a bad request) stop it."""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from collections.abc import Callable

import torch

from batchlab.backend.engine import Engine
from batchlab.backend.runtime import Runtime
from batchlab.backend.sampling import SamplingParams, sample_row
from batchlab.backend.server.memory import HeapTrim
from batchlab.backend.server.stops import StopMatcher
from batchlab.backend.speculative.setup import check_backend_speculative, speculative_engine
from batchlab.backend.step import run_step
from batchlab.core.config import SchedulerConfig
from batchlab.core.features import StepHistory
from batchlab.core.metrics import MetricsRecorder
from batchlab.core.request import Request, Sequence, Status
from batchlab.core.result import RunResult
from batchlab.core.run_meta import RunMeta
from batchlab.core.schedulers import make_scheduler
from batchlab.core.speculative.config import SpeculativeConfig

log = logging.getLogger(__name__)
_IDLE_WAIT_S = 0.05  # an idle loop re-checks its stop flag this often
MAX_FAILED_STEPS = 3  # failed steps in a row that mean the engine itself is broken


@dataclass(frozen=True)
class TokenEvent:
    """One sampled token of a request (or, with error set, why it ended)."""
    token: int
    index: int  # 0 for the first token
    time_s: float  # the step's end, on the server clock
    finished: bool
    error: str = ""
    status: int = 500  # the HTTP status an error maps to
    text: str | None = None  # the text to send (None: the token's own); set with stop strings
    finish_reason: str = "length"  # with finished: "length" or "stop"


class PerRequestEngine(Engine):
    """Samples each row with its own request's SamplingParams (the server's temperature
    when the request gives none): greedy rows take the argmax; the others draw from
    their request's seeded generator, or else the server's, in row order, so a run is
    repeatable. A row whose sampling fails gets a placeholder token and its reason in
    `failed`: the loop fails that request alone."""

    def __init__(self, runtime: Runtime, num_blocks: int, block_size: int, temperature: float,
                 seed: int, params: dict[int, SamplingParams]) -> None:
        # As Runtime.engine makes one for `batchlab run`.
        super().__init__(runtime.runner, runtime.cache(num_blocks, block_size),
                         temperature=temperature, seed=seed, prompt_seed=seed)
        self.params = params
        self.generators: dict[int, torch.Generator] = {}
        self.failed: dict[int, str] = {}
        self.default = SamplingParams(temperature=temperature)

    def sample(self, logits: torch.Tensor, seqs: list[Sequence] | None = None) -> torch.Tensor:
        params = [self.params.get(s.id, self.default) for s in seqs or []]
        out = logits.argmax(dim=-1)
        for row, (seq, p) in enumerate(zip(seqs or [], params)):
            if p.greedy:
                continue
            try:
                gen = self.generators.get(seq.id, self.generator)
                out[row] = sample_row(logits[row], p, gen)
            except Exception as e:  # noqa: BLE001 -- this request fails, not the step
                self.failed[seq.id] = f"sampling failed: {type(e).__name__}: {e}"
        return out


class StepObserver:
    """What the loop reports besides tokens (metrics.ServerMetrics implements it)."""

    def watch(self, sched) -> None: ...

    def on_step(self, sched, batch, kv_used_fraction: float) -> None: ...

    def on_token(self, seq: Sequence, gap_s: float | None) -> None: ...

    def on_done(self, seq: Sequence) -> None: ...


Emit = Callable[[TokenEvent], None]


class EngineLoop:
    def __init__(self, runtime: Runtime, scheduler: SchedulerConfig, *, temperature: float = 0.0,
                 seed: int = 0, observer: StepObserver | None = None, warmup: bool = True,
                 speculative: SpeculativeConfig | None = None) -> None:
        """speculative: draft and verify as it says (backend/speculative/; greedy requests only)."""
        self.runtime, self.config = runtime, scheduler
        drafting = speculative is not None and speculative.on
        runtime.use_draft(speculative.draft_model if drafting else None)  # its KV shares the pool
        num_blocks = scheduler.num_kv_blocks or runtime.kv_blocks(scheduler.block_size)
        self.sched = make_scheduler(scheduler, num_blocks)
        self._params: dict[int, SamplingParams] = {}
        self._stops: dict[int, StopMatcher] = {}
        self.engine = PerRequestEngine(runtime, self.sched.kv.num_blocks, scheduler.block_size,
                                       temperature, seed, self._params)
        self.speculating = speculative is not None and speculative.on
        if speculative is not None and self.speculating:
            check_backend_speculative(speculative, temperature)
            self.engine = speculative_engine(self.engine, speculative, served=True,
                                             draft=runtime.draft_parts(self.sched.kv.num_blocks,
                                                                       scheduler.block_size))
            self.sched.use_emission(self.engine.emission)
        self.temperature, self.seed = temperature, seed
        self.observer = observer or StepObserver()
        self.observer.watch(self.sched)
        self.rec = MetricsRecorder()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._live: dict[int, tuple[Sequence, Emit]] = {}
        self._ids = 0
        self._id_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.error = ""  # set if the engine broke: the loop stops, /health reports it
        self.steps = 0
        self.failed_steps = 0  # in a row
        self.history = StepHistory()  # after_prefill / after_idle, as backend/driver.py
        self.idle_s = 0.0
        self.heap = HeapTrim()  # freed memory back to the system, between steps
        self.flush: Callable[[], None] | None = None  # see _step; set by the HTTP side
        # Called on this thread with the requests that ended, as their rows are recorded
        # (serve's core/run_journal.py): what a kill leaves.
        self.on_rows: Callable[[list[Sequence]], None] | None = None
        t = time.perf_counter()
        if warmup:
            self.engine.warmup()
        self.warmup_s = time.perf_counter() - t
        self._t0 = time.perf_counter()

    # -- called from the HTTP side -------------------------------------------------
    def clock(self) -> float:
        return time.perf_counter() - self._t0

    def new_request(self, prompt_ids: list[int], max_tokens: int, arrival: float) -> Request:
        """A request that arrived at `arrival` (this loop's clock) with a fresh id."""
        with self._id_lock:
            rid, self._ids = self._ids, self._ids + 1
        return Request(id=rid, arrival=arrival, prompt_len=len(prompt_ids),
                       output_len=max_tokens, prompt_token_ids=tuple(prompt_ids))

    def reject_reason(self, request: Request) -> str:
        """Why the scheduler would refuse it ('' if it can run): read-only, thread-safe."""
        return self.sched.reject_reason(request)

    def submit(self, request: Request, emit: Emit, params: SamplingParams | None = None,
               stop: StopMatcher | None = None) -> None:
        self._inbox.put(("add", request, emit, (params, stop)))
        self._wake.set()

    def abort(self, request_id: int) -> None:
        self._inbox.put(("abort", request_id, None, None))
        self._wake.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- the thread ----------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="batchlab-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the step in flight, then stop; requests still live get an error event."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        torch.set_num_threads(self.runtime.threads)  # intra-op threads are per thread
        try:
            while not self._stop.is_set():
                self._take_inbox()
                if self._step():
                    self.heap.after_step()
                else:
                    self.heap.on_idle()
                    t = time.perf_counter()
                    self._wake.wait(_IDLE_WAIT_S)
                    self._wake.clear()
                    self.idle_s += time.perf_counter() - t
        except Exception as e:  # a broken engine ends the server, said once
            log.exception("engine loop failed")
            self.error = f"engine loop failed: {type(e).__name__}: {e}"
        finally:
            self._close_live(self.error or "the server is shutting down", 500 if self.error else 503)

    def _take_inbox(self) -> None:
        now = self.clock()
        while True:
            try:
                kind, item, emit, extra = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "add":
                params, stop = extra
                if self.speculating and params is not None and not params.greedy:
                    emit(TokenEvent(-1, -1, now, True, "this server speculates and verifies greedily: "
                                    "give temperature 0", 400))
                    continue
                seq = self.sched.add(item, now)
                if seq.status is Status.REJECTED:  # checked before, but lengths can race
                    self._record([seq])
                    emit(TokenEvent(-1, -1, now, True, seq.reject_reason, 400))
                    continue
                self._live[item.id] = (seq, emit)
                if params is not None:
                    self._params[item.id] = params
                    gen = params.generator(self.engine.runner.device)
                    if gen is not None:
                        self.engine.generators[item.id] = gen
                if stop is not None:
                    self._stops[item.id] = stop
            elif item in self._live:  # abort: the client left
                seq, _ = self._live[item]
                if self.sched.abort(seq, now):
                    self._record([seq])
                    self.observer.on_done(seq)
                self._forget(seq)

    def _record(self, seqs: list[Sequence]) -> None:
        self.rec.record_requests(seqs, 0)
        if self.on_rows is not None:
            self.on_rows(seqs)

    def _forget(self, seq: Sequence) -> None:
        """Drop all the loop holds of an ended request, its live entry last: another
        thread that sees it gone sees nothing else of the request left."""
        self.engine.forget(seq)
        self._params.pop(seq.id, None)
        self._stops.pop(seq.id, None)
        self.engine.generators.pop(seq.id, None)
        self.engine.failed.pop(seq.id, None)
        self._live.pop(seq.id, None)

    def _fail(self, seq: Sequence, reason: str, now: float) -> None:
        """End one request with an error: its row says `failed` and why, its client gets
        a 500, its KV blocks are freed; the others go on."""
        self.sched.abort(seq, now)  # no-op if complete() already finished it
        seq.status, seq.reject_reason, seq.finish = Status.FAILED, reason, now
        entry = self._live.get(seq.id)
        if entry is not None:
            entry[1](TokenEvent(-1, -1, now, True, reason, 500))
        self._record([seq])
        self.observer.on_done(seq)
        self._forget(seq)

    def _end_at_stop(self, seq: Sequence, now: float) -> None:
        """A stop string ended it before max_tokens: finished, with the tokens it made."""
        self.sched.abort(seq, now)
        seq.status, seq.finish = Status.FINISHED, now
        seq.request = seq.request.replace(output_len=seq.num_generated)

    def _step(self) -> bool:
        """One engine step if there is work; False when idle."""
        sched = self.sched
        if not sched.has_work():
            self.history.went_idle()
            return False
        now = self.clock()
        batch = sched.schedule(now)
        if batch.is_empty:
            self.history.went_idle()
            wake = sched.next_wakeup(now)  # static batching holding for a fuller batch
            if wake is not None:
                time.sleep(min(max(0.0, wake - self.clock()), _IDLE_WAIT_S))
                return True
            return False
        last = [s.last_token for s in batch.seqs]  # before record_step stamps this step's
        try:
            _, end, finished = run_step(sched, self.engine, batch, self.history, self.rec, self.clock)
        except Exception as e:  # the step's requests fail, the server goes on
            self.failed_steps += 1
            log.exception("engine step failed")
            reason = f"engine step failed: {type(e).__name__}: {e}"
            if self.failed_steps >= MAX_FAILED_STEPS:
                raise
            for seq in list(batch.seqs):
                self._fail(seq, reason, self.clock())
            return True
        self.failed_steps = 0
        kv = sched.kv
        self.steps += 1
        self.observer.on_step(sched, batch, kv.num_used / kv.num_blocks)
        emitted = False
        failed = self.engine.failed
        ended = []  # by a stop string
        for i, seq in enumerate(batch.seqs):
            count = batch.sampled[i]  # tokens kept (several where drafts were accepted)
            if count and seq.id not in failed:
                for j in range(count):  # the ones kept together arrive together: gaps of 0
                    gap = (end - last[i] if j == 0 else 0.0) if seq.num_generated - count + j > 0 else None
                    self.observer.on_token(seq, gap)
                emitted |= self._emit_token(seq, end, ended, count)
        if emitted and self.flush is not None:
            # Let the HTTP side send this step's tokens before the next forward pass
            # takes the GIL and the core: a client then sees a token when it was made.
            self.flush()
        for seq in [s for s in batch.seqs if s.id in failed]:
            self._fail(seq, failed[seq.id], end)
        for seq in ended:
            self._end_at_stop(seq, end)
        done = [s for s in (*finished, *ended) if s.status is Status.FINISHED]
        if done:
            self._record(done)
            for seq in done:
                self.observer.on_done(seq)
                self._forget(seq)
        return True

    def _emit_token(self, seq: Sequence, end: float, ended: list[Sequence], count: int = 1) -> bool:
        """Send a sequence's `count` new tokens to its client; True if it had one. A stop
        string ending it within them drops the ones after (they never reach the client)."""
        entry = self._live.get(seq.id)
        if entry is None:
            return False
        stop = self._stops.get(seq.id)
        for j in range(count):
            index = seq.num_generated - count + j
            last = seq.status is Status.FINISHED and j == count - 1
            token, text, reason = seq.output_token_ids[index], None, "length"
            if stop is not None:
                text = stop.feed(token, last)
                if stop.stopped:
                    last, reason = True, "stop"
                    if j < count - 1:  # the request ends here: not with what was kept after
                        del seq.output_token_ids[index + 1:]
                        seq.num_generated = index + 1
                        seq.request = seq.request.replace(output_len=seq.num_generated)
                    if seq.status is not Status.FINISHED:
                        ended.append(seq)
            entry[1](TokenEvent(token, index, end, last, text=text, finish_reason=reason))
            if last:
                break
        return True

    def _close_live(self, reason: str, status: int) -> None:
        now = self.clock()
        for seq, emit in self._live.values():
            emit(TokenEvent(-1, -1, now, True, reason, status))
        self._live.clear()

    # -- after the run ---------------------------------------------------------------
    def result(self, meta: dict | None = None) -> RunResult:
        """The request and step tables (call after stop()); rows of requests still
        waiting or running say so."""
        self._take_inbox()  # late aborts
        left = [*self.sched.running, *self.sched.waiting()]
        rec = self.rec
        rec.record_requests(left, 0)
        self.rec = MetricsRecorder()  # a second call does not add the rows again
        st, kv = self.engine.stats, self.sched.kv
        wall = self.clock()
        info = {
            "world": "real", "source": "serve", "policy": self.config.policy, "replicas": 1,
            "router": "round_robin", "num_kv_blocks": kv.num_blocks, "block_size": kv.block_size,
            "workload": "HTTP requests to batchlab serve", **self.runtime.meta().as_dict(),
            "kv_pool_bytes": self.engine.cache.nbytes, "temperature": self.temperature,
            "seed": self.seed, "warmup_s": round(self.warmup_s, 4), "wall_s": round(wall, 4),
            "steps": self.steps, "engine_prepare_s": round(st.prepare_s, 4),
            "engine_forward_s": round(st.forward_s, 4), "idle_s": round(self.idle_s, 4),
            "heap_trims": self.heap.count, "heap_trim_s": round(self.heap.seconds, 4),
            "requests_received": self._ids, "interrupted": False, "error": self.error,
            **(meta or {}),
        }
        if self.sched.emission.stats():  # a speculating server: what verification kept
            info["speculative"] = self.sched.emission.stats()
        return RunResult.from_recorder(rec, RunMeta(**info))
