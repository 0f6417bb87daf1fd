"""One replica: the serving loop of DESIGN.md as a SimPy process."""
from __future__ import annotations

from typing import Callable

import simpy

from core.batch import step_features
from core.cost import CostModel
from core.metrics import MetricsRecorder
from core.request import Request, Sequence, Status
from core.schedulers.base import Scheduler


class Replica:
    def __init__(self, env: simpy.Environment, index: int, scheduler: Scheduler,
                 cost: CostModel, recorder: MetricsRecorder,
                 on_done: Callable[[Sequence], None]) -> None:
        self.env, self.index, self.scheduler = env, index, scheduler
        self.cost, self.recorder, self.on_done = cost, recorder, on_done
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
                continue
            features = step_features(batch)
            kv_used = kv.num_used
            start = env.now
            yield env.timeout(self.cost.step_time(features))
            finished = sched.complete(batch, env.now)
            rec.record_step(self.index, start, env.now - start, batch, features,
                            kv_used, kv.num_blocks, seats)
            if finished:
                rec.record_requests(finished, self.index)
                self.outstanding -= len(finished)
                for seq in finished:
                    self.on_done(seq)
