"""One replica: the serving loop of DESIGN.md as a SimPy process."""
from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate
from typing import Callable

import simpy

from core.batch import Batch, StepFeatures, step_features
from core.cost import CostModel, decode_run_times
from core.metrics import MetricsRecorder
from core.request import Request, Sequence, Status
from core.schedulers.base import Scheduler
from sim.events import late

# Called after every step with (replica, start, duration, batch), once complete() has
# run: for studies that need more than the step table (e.g. which request holds which
# seat). Fast-forward is off while an observer watches, so it sees every step.
StepObserver = Callable[[int, float, float, Batch], None]

MIN_FAST_FORWARD = 2  # shorter runs are cheaper stepped one by one


class Replica:
    def __init__(self, env: simpy.Environment, index: int, scheduler: Scheduler,
                 cost: CostModel, recorder: MetricsRecorder,
                 on_done: Callable[[Sequence], None],
                 next_arrival: Callable[[], float] | None = None,
                 observer: StepObserver | None = None) -> None:
        """next_arrival: the earliest time anything may still be submitted (inf if
        never); given, it enables fast-forward over steady decode runs."""
        self.env, self.index, self.scheduler = env, index, scheduler
        self.cost, self.recorder, self.on_done = cost, recorder, on_done
        self.next_arrival = None if observer else next_arrival
        self.observer = observer
        self._wake = env.event()
        self.outstanding = 0  # requests submitted and not yet finished (for routing)
        env.process(self._loop())

    def submit(self, request: Request) -> None:
        seq = self.scheduler.add(request, self.env.now)
        if seq.status is Status.REJECTED:
            self.recorder.record_requests([seq], self.index)
            self.on_done(seq)
            return
        self.outstanding += 1
        if not self._wake.triggered:
            self._wake.succeed()

    def _loop(self):
        env, sched, rec = self.env, self.scheduler, self.recorder
        seats, kv = sched.max_seqs, sched.kv
        while True:
            batch = sched.schedule(env.now)
            if batch.is_empty:
                # Sleep until an arrival (or the scheduler's own deadline): no polling.
                self._wake = env.event()
                wakeup = sched.next_wakeup(env.now)
                if wakeup is None:
                    yield self._wake
                else:
                    yield self._wake | env.timeout(max(0.0, wakeup - env.now))
                yield late(env)  # let the rest of a same-instant burst arrive first
                continue
            features = step_features(batch)
            run = self._fast_forward(batch, features) if self.next_arrival is not None else None
            if run is not None:
                end, finished = run
                yield env.timeout(end - env.now)
                sched.retire(finished, env.now)
            else:
                kv_used = kv.num_used
                start = env.now
                yield env.timeout(self.cost.step_time(features))
                finished = sched.complete(batch, env.now)
                rec.record_step(self.index, start, env.now, batch, features,
                                kv_used, kv.num_blocks, seats)
                if self.observer:
                    self.observer(self.index, start, env.now - start, batch)
            if finished:
                rec.record_requests(finished, self.index)
                self.outstanding -= len(finished)
                for seq in finished:
                    self.on_done(seq)

    def _fast_forward(self, batch: Batch, features: StepFeatures) -> tuple[float, list] | None:
        """Advance over the steady decode run this batch starts: up to and including the
        step where a sequence finishes, the last step KV memory allows, or the last step
        that starts before the next possible arrival. Records every step as stepping would
        and returns (the time the run ends, the sequences that finish then), or None to
        step normally."""
        sched = self.scheduler
        k, arrival_sensitive = sched.steady_decode_steps(batch)
        if k < MIN_FAST_FORWARD:
            return None
        t0 = self.env.now
        # Summed from t0 in order, as the clock advances when stepping one by one.
        ends = list(accumulate(decode_run_times(self.cost, features, k).tolist(), initial=t0))
        starts, ends = ends[:-1], ends[1:]
        m = k
        if arrival_sensitive:
            # Steps scheduled before the next arrival cannot see it.
            m = bisect_left(starts, self.next_arrival())
            if m < MIN_FAST_FORWARD:
                return None
            del starts[m:], ends[m:]
        last_token = [s.last_token for s in batch.seqs]
        kv_used, done = sched.advance_decodes(batch, m)
        end = ends[-1]
        for s in batch.seqs:
            s.last_token = end
        self.recorder.record_decode_run(self.index, starts, ends, features, kv_used,
                                        sched.kv.num_blocks, sched.max_seqs, last_token)
        return end, done
