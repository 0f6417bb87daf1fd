"""One replica: the serving loop of DESIGN.md on SimPy's clock (a generator that the
replica resumes itself: sim/resumption.py)."""
from __future__ import annotations

import math
from typing import Callable, Final, Generator, cast

import simpy
from simpy.events import NORMAL, URGENT

from batchlab.core.batch import Batch, StepObserver, step_features
from batchlab.core.cost.form import CostModel, FormDefaults
from batchlab.core.fast_forward import DecodeRun
from batchlab.core.features import StepFeatures, StepHistory
from batchlab.core.metrics import MetricsRecorder
from batchlab.core.request import Request, Sequence, Status
from batchlab.core.schedulers.base import Scheduler
from batchlab.sim.admission import AdmissionLag
from batchlab.sim.arrivals import Arrivals
from batchlab.sim.events import LATE
from batchlab.sim.pending_run import PendingRun
from batchlab.sim.replica_loads import LoadBoard
from batchlab.sim.resumption import EventQueue, Resumption, moved_on, moved_to
from batchlab.sim.run_plan import MIN_FAST_FORWARD, price_run

# StepObserver (core/batch.py): fast-forward is off while one watches, so it sees every step.
# Final: compiled, read as constants, not looked up in the module's dict.
IDLE_BATCH: Final = Batch()  # what a sleeping replica's loop holds
IDLE_FEATURES: Final = StepFeatures()
NO_SEQS: Final[list[Sequence]] = []
NO_CONTEXT: Final = (0, 0)  # (after_prefill, after_idle) of a step after a decode


class Replica:
    def __init__(self, env: simpy.Environment, index: int, scheduler: Scheduler,
                 cost: CostModel, recorder: MetricsRecorder, on_done: Callable[[Sequence], None],
                 next_arrival: Callable[[], float] | None = None,
                 observer: StepObserver | None = None, closed_loop: bool = False,
                 window: int = 0, pulled: Arrivals | None = None,
                 queue: EventQueue | None = None) -> None:
        """next_arrival: the earliest time anything may still be submitted (inf if
        never); given, it enables fast-forward over steady decode runs. closed_loop: a
        finish brings its user's next request, so fast-forward stops at finishes and
        the next step waits for a request sent at the same instant (as a real server
        sees it before forming that step). window: the model's sliding window (0: none),
        for the windowed step features (of stepped and fast-forwarded steps alike).
        pulled: the open loop's arrivals, which this engine pulls (sim/arrivals.py): those
        due by now are handed on first whenever it resumes, and an idle engine sleeps
        until the next of them is due. queue: where its waits go (sim/resumption.py;
        None: SimPy's queue)."""
        self.env, self.index, self.scheduler = env, index, scheduler
        self.cost, self.recorder, self.on_done = cost, recorder, on_done
        # A price of one level whatever the clock (FormDefaults.at: itself) is not asked
        # for it every decision (a call through Python); one whose decodes ignore their
        # context prices a run's first step on the run's line (core/fast_forward.py).
        fixed = isinstance(cost, FormDefaults) and type(cost).at is FormDefaults.at
        self._moves, self._no_context = not fixed, fixed and not cast(FormDefaults, cost).decode_reads_context()
        self.next_arrival, self.window = None if observer else next_arrival, window
        if self.next_arrival is not None:
            scheduler.keep_decodes_in_group(window)
        self.observer, self.closed_loop = observer, closed_loop
        self.history = StepHistory()  # after_prefill / after_idle, as backend/driver.py
        self.outstanding = 0  # requests submitted and not yet finished (for routing)
        self.pulled = pulled
        # _fast_forward asks pulled arrivals natively for what next_arrival would say.
        assert pulled is None or self.next_arrival in (None, pulled.next_time), \
            "pulled arrivals come with their own next_time as next_arrival"
        # The loop runs as a generator that this replica resumes itself, not as a SimPy
        # process (sim/resumption.py): _next is its next resumption (one at a time),
        # _alarm an idle replica's timed wake-up (one that a request came before is
        # stale: ignored when due).
        self._loop_steps = self._loop()
        self.queue = queue
        self._next = Resumption([self._resume], queue)
        self._alarm: Resumption | None = None
        self._sleeping = False  # idle, until a request comes or the alarm is due
        # Pulled arrivals that a round-robin router deals out (sim/simulate.py): only every
        # route_every-th one, from this replica's index on, can come here, and only that
        # one ends its runs and wakes it (1: any arrival may).
        self.route_every = 1
        # Pulled arrivals routed by the replicas' state (sim/pending_run.py): a run is
        # priced ahead to about the arrival `lookahead` from now and applied late (_pending),
        # only an arrival routed here cuts it, and only one routed here wakes it (0: off).
        self.lookahead = 0
        self._pending: PendingRun | None = None
        self._finishing: list[Sequence] = []  # a cut run's members that finish as it ends
        # Told each change of what load() reads (least_loaded priced ahead: sim/replica_loads.py).
        self.board: LoadBoard | None = None
        self.board_pos = 0  # this replica's position on it
        # Told the start of each step as it is priced (a KV tier's rows: core/kv_tiers/).
        self.step_note: Callable[[float], None] | None = None
        # Async scheduling (sim/admission.py; set before the loop starts, fast-forward off):
        # a request that comes while the engine is busy joins a step later.
        self.lag: AdmissionLag | None = None
        self._started = 0  # steps started (counted where lag is set)
        self._busy = False  # a step started since the engine last went idle
        self._next.push(env, env._now, URGENT)  # where env.process would start it

    def _resume(self, event: object) -> None:
        """The loop goes on to its next wait (pushed by itself); a cut run's old one is stale."""
        if event is self._next:
            next(self._loop_steps)

    def _alarm_due(self, event: object) -> None:
        """An idle replica's alarm: it wakes, where nothing woke it first, after the
        requests due now are handed on (which may wake it)."""
        if event is not self._alarm or not self._sleeping:
            return
        self._pull(self.env._now)
        if self._sleeping:
            self._wake_up()

    def _wake_up(self) -> None:
        """An idle replica goes on after everything else due now (LATE), so that the rest
        of a same-instant burst arrives first."""
        self._sleeping, self._alarm = False, None
        if self.route_every > 1 and self.pulled is not None and self.pulled.asleep:
            self.pulled.asleep[self.index] = False  # (Arrivals.sleep)
        self._next.push(self.env, self.env._now, LATE)

    def submit(self, request: Request, now: float) -> None:
        if self._pending is not None:
            self._cut(now)
        if self.lag is not None and self._busy:
            self.lag.hold(request, self._started)  # counted for routing once let in
            return
        self._queued(self.scheduler.add(request, now))

    def submit_sequence(self, seq: Sequence, now: float) -> None:
        """submit() for a sequence begun elsewhere (a prefill pool's hand-off,
        sim/disaggregated): queued as it comes, or rejected as submit() would."""
        if self._pending is not None:
            self._cut(now)
        self.scheduler.add_sequence(seq, now)
        self._queued(seq)

    def load(self) -> int:
        """Requests submitted here and not yet finished, as a router sees them now: those
        of a run priced ahead that finish before the step in progress are out."""
        pending = self._pending
        if pending is None:
            return self.outstanding
        return self.outstanding - pending.finished_before(self.env._now)

    def _cut(self, now: float) -> None:
        """An arrival at `now` comes to this replica's run priced ahead: its steps up to
        the one in progress are applied, and the loop resumes as that one ends."""
        pending = self._pending
        assert pending is not None
        self._pending = None
        self._report()
        m = pending.stop_for(now)
        end, self._finishing = self._apply(pending.batch, pending.run, pending.context, m)
        if m < pending.last:  # the wait for the whole run comes sooner: where its steps took it
            # (a wait at the whole run's end is one a run cut at every arrival never had: the
            # run's end does not reach for it)
            if not self._next.move(self.env, end, NORMAL, False):
                self._next = Resumption([self._resume], self.queue)  # the old wait goes stale
                self._next.push(self.env, end, NORMAL)

    def settle(self) -> None:
        """Apply a run priced ahead in full (the simulation stopped short: interrupted)."""
        pending = self._pending
        if pending is not None:
            self._pending = None
            self._report()
            self._finishing = self._apply(pending.batch, pending.run, pending.context, pending.last)[1]

    def record_left(self) -> None:
        """Its run over, or stopped short: a run priced ahead applied in full, then the
        requests still running or waiting recorded once (their rows say so)."""
        self.settle()
        self.recorder.record_requests([*self.scheduler.running, *self.scheduler.waiting()], self.index)

    def let_go(self) -> None:
        """Its run over (sim/apart.py): its loop and waits let go, which hold it in cycles
        that only the collector would free; its state is freed now, while in cache."""
        self._loop_steps.close()
        self._next = Resumption([], None)
        self._alarm = None

    def _report(self) -> None:
        """What load() reads changed: the board (if any) is told."""
        board = self.board
        if board is not None:
            board.changed(self.board_pos, self.outstanding, self._pending)

    def _queued(self, seq: Sequence) -> None:
        """A sequence the scheduler took (or rejected): counted, and the loop woken."""
        if seq.status is Status.REJECTED:
            self.recorder.record_requests([seq], self.index)
            self.on_done(seq)
            pulled = self.pulled
            if self._sleeping and pulled is not None and pulled.asleep and pulled.asleep[self.index]:
                self._wake_up()  # as its own alarm would (Arrivals.sleep): it sleeps again from now
            return
        self.outstanding += 1
        self._report()
        if self._sleeping:
            self._wake_up()

    def _loop(self) -> Generator[None, None, None]:
        # (Typed, this generator is compiled as typed code: untyped, every name in it was
        # an object, and every call and attribute went through Python.)
        env, sched, rec, pulled, queue = self.env, self.scheduler, self.recorder, self.pulled, self.queue
        seats, kv = sched.max_seqs, sched.kv
        windowed_group = sched.group if sched.group is not None and sched.group.window else None
        lag = self.lag
        run: tuple[float, list] | None = None  # (end, those finishing then) of a run; None: step
        while True:
            now = env._now  # SimPy's `now` is a property: a Python call from compiled code
            if pulled is not None:
                self._pull(now)
            if windowed_group is not None:
                windowed_group.now = now  # DecodeGroup.gaps_as_stepped
            if lag:  # those held since before the last step started are let in
                for request in lag.due(self._started):
                    self._queued(sched.add(request, now))
            batch = sched.schedule(now)
            if batch.is_empty and lag:  # an idle engine's empty queue takes the rest at once
                for request in lag.all():
                    self._queued(sched.add(request, now))
                batch = sched.schedule(now)
            if batch.is_empty:
                self._busy = False
                self.history.went_idle()
                # Sleep until an arrival (or the scheduler's own deadline): no polling.
                wakeup = sched.next_wakeup(now)
                self._sleeping = True
                # Dealt round robin, the arrivals' one alarm for the sleepers wakes it.
                shared = (wakeup is None and self.route_every > 1 and queue is not None
                          and pulled is not None and pulled.sleep(self.index, now))
                if not shared:
                    if pulled is not None:
                        arrival = self._next_pulled(pulled)
                        wakeup = arrival if wakeup is None else min(wakeup, arrival)
                    if wakeup is not None and wakeup < math.inf:
                        self._alarm = Resumption([self._alarm_due], self.queue)
                        # at the wake-up's own time (now + (wakeup - now) can miss it by an ulp,
                        # and the clock would end there though nothing happens then)
                        self._alarm.push(env, wakeup if wakeup > now else now, NORMAL)
                # Asleep, it lets its last decision go (at 100,000 replicas the collector walked them)
                batch, features, finished, run = IDLE_BATCH, IDLE_FEATURES, NO_SEQS, None
                yield None  # woken (_wake_up) LATE at the instant a request or the alarm came
                continue
            context = self.history.context(now)
            cost = self.cost.at(now) if self._moves else self.cost  # where the level moves with the clock
            run = None  # stepped one by one where an observer watches (next_arrival None)
            if self.next_arrival is not None and not self.lookahead:
                run = self._fast_forward(batch, now, context, cost)
            elif self.next_arrival is not None:  # priced ahead, applied as it ends or as an arrival here cuts it
                planned = self._plan(batch, now, context, cost)
                if planned is not None:
                    priced, sensitive_from, m = planned
                    if not priced.num_seqs:  # PendingRun reads lists a step
                        priced.num_seqs = priced.sizes_by_step()
                    pending = PendingRun(batch, priced, context, sensitive_from, m)
                    self._pending = pending
                    self._report()
                    run = pending.end(), []
            if run is not None:
                end, finished = run
                if self.step_note is not None:  # the run's first step was formed by schedule()
                    self.step_note(now)
                if not moved_to(env, end, queue):
                    # The clock lands where its steps took it, one by one, as when stepped
                    # (now + (end - now) can miss end by an ulp).
                    self._next.push(env, end, NORMAL)
                    # Its first step let go while in cache, not as the run ends (100,000 replicas)
                    batch, features = IDLE_BATCH, IDLE_FEATURES
                    yield None
                now = env._now
                if self.lookahead:
                    if self._pending is not None:  # nothing came to cut it
                        self.settle()
                    finished, self._finishing = self._finishing, []
                if pulled is not None:
                    self._pull(now)
                self.history.ran(now, False)
                sched.retire(finished, now)
            else:
                features = step_features(batch, context[0], context[1], self.window)
                kv_used, cached = kv.num_used, kv.num_cached
                start = now
                if lag is not None:
                    self._started += 1
                    self._busy = True
                took = cost.step_time(features)
                if batch.kv_loaded:  # KV brought in from elsewhere: its home's price (core/kv_home.py)
                    took += sched.kv_home.load_seconds(batch.kv_loaded)
                if batch.kv_saved:  # and preempted KV moved out, before the forward (vLLM v0)
                    took += sched.kv_home.save_seconds(batch.kv_saved)
                if self.step_note is not None:
                    self.step_note(start)
                if not moved_on(env, took, queue):
                    self._next.push_after(env, took, NORMAL)
                    yield None
                now = env._now
                if pulled is not None:
                    self._pull(now)
                self.history.ran(now, features.num_prefill_seqs > 0)
                finished = sched.complete(batch, now)
                rec.record_step(self.index, start, now, batch, features,
                                kv_used, kv.num_blocks, seats, cached)
                if self.observer:
                    self.observer(self.index, start, now - start, batch)
            if finished:
                self._finish(finished)
                if self.closed_loop:  # the users' next requests, if sent now, come first
                    self._next.push(env, env._now, LATE)
                    yield None

    def _pull(self, now: float) -> None:
        """The pulled arrivals due by now handed on (compiled, natively: not the loop's Optional)."""
        pulled = self.pulled
        if pulled is not None:
            pulled.pull(now)

    def _next_pulled(self, pulled: Arrivals) -> float:
        """The next pulled arrival that can come to this replica (inf where any may:
        routed by state, the one that comes wakes it)."""
        if self.lookahead:
            return math.inf
        if self.route_every == 1:
            return pulled.next_time()
        return pulled.next_time_for(self.index, self.route_every)

    def _fast_forward(self, batch: Batch, t0: float, context: tuple[int, int],
                      cost: CostModel) -> tuple[float, list] | None:
        """Advance over the run of decode steps this batch starts (core/decode_group.py):
        through finishes where they let nobody in, up to the last step that starts before
        the next possible arrival where one could join, or the last KV memory allows.
        Records every step, and finishes sequences at their times, as stepping would;
        returns (the time the run ends, the sequences that finish then), or None to step
        normally. t0: now; context: the first step's (after_prefill, after_idle); cost: the price
        of the run's steps (all at the level of the moment it starts)."""
        planned = self._plan(batch, t0, context, cost)
        return None if planned is None else self._apply(batch, planned[0], context, planned[2])

    def _plan(self, batch: Batch, t0: float, context: tuple[int, int],
              cost: CostModel) -> tuple[DecodeRun, int, int] | None:
        """_fast_forward's run, priced and not applied: (the run, sensitive_from, its steps
        to apply), or None to step normally (sim/run_plan.py). Priced ahead (lookahead), it
        ends about the lookahead-th arrival from now, or earlier where KV memory ends it."""
        sched = self.scheduler
        plan = sched.steady_decode_run(batch, through_finishes=not self.closed_loop)
        if plan is None or plan[0] < MIN_FAST_FORWARD:
            return None
        k, sensitive_from = plan
        arrival = math.inf  # the next one that could join (read only where one could)
        pulled = self.pulled  # pulled arrivals are the next_arrival (sim/simulate.py): called natively
        if sensitive_from <= k:
            if self.lookahead and pulled is not None:
                arrival = pulled.time_ahead(self.lookahead)  # only sizes the pricing
            elif pulled is not None:
                arrival = self._next_pulled(pulled)
            elif self.next_arrival is not None:
                arrival = self.next_arrival()
        group = sched.group
        assert group is not None  # fast-forward keeps the decodes in a group
        priced = price_run(group, sched.kv.num_spare, batch, t0, NO_CONTEXT if self._no_context else context,
                           cost, k, sensitive_from, arrival, self.lookahead > 0, self.recorder.record_steps)
        return None if priced is None else (priced[0], sensitive_from, priced[1])

    def _apply(self, batch: Batch, run: DecodeRun, context: tuple[int, int], m: int) -> tuple[float, list]:
        """Apply steps 1..m of a run priced by _plan (`batch` its first step; context that
        step's): recorded, and the members that finish before step m retired at their
        times; (the end of step m, those finishing in it)."""
        sched, clock = self.scheduler, run.clock
        group, kv = sched.group, sched.kv
        assert group is not None
        kv_used, done = group.advance(m, kv, self.recorder.record_steps)
        self.recorder.record_decode_run(self.index, run, m, kv_used, kv.num_blocks, sched.max_seqs,
                                        batch, kv.num_cached, context)
        # The ones that finished before the last step did so before any arrival.
        early = [(seq, clock.time(step)) for seq, step in done if step < m]
        if early:
            sched.retire([e[0] for e in early], [e[1] for e in early])
            self._finish([e[0] for e in early])
        return clock.time(m), [seq for seq, step in done if step == m]

    def _finish(self, finished: list[Sequence]) -> None:
        """Report sequences the scheduler has finished."""
        self.recorder.record_requests(finished, self.index)
        self.outstanding -= len(finished)
        self._report()
        for seq in finished:
            self.on_done(seq)
