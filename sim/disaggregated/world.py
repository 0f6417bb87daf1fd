"""The disaggregated world: arrivals go to the prefill pool's router; a prompt finished
there (its first token sampled) goes to the decode pool's router, whose pick receives
its KV over the link (core/pd_handoffs.py) and queues the request on arrival;
a decode replica admits it when it has the blocks (core/kv_handoff.py says what it
holds). Replicas are numbered across the pools: prefill 0..P-1, decode P..P+D-1.

Fast-forward stays exact on the decode side: its replicas see, as their next possible
arrival, the earliest KV transfer in flight, or now while any prefill replica has work
(a prefill may finish at any step), or else the next request the workload sends."""
from __future__ import annotations

import heapq
import math
from typing import Callable

import simpy

from batchlab.core.batch import StepObserver
from batchlab.core.cost.form import attention_window
from batchlab.core.kv_handoff import decode_sequence, prefill_request
from batchlab.core.kv_tiers import HandOffTier, TieredHome, lone_prefill_seconds
from batchlab.core.metrics import MetricsRecorder
from batchlab.core.pd_deployment import PDDeployment, Pool
from batchlab.core.pd_handoffs import HandOffLog, LinkQueues
from batchlab.core.request import Request, Sequence, Status
from batchlab.core.schedulers import make_scheduler
from batchlab.core.workload import Workload
from batchlab.sim.arrivals import Arrivals
from batchlab.sim.engine import Replica
from batchlab.sim.events import urgent
from batchlab.sim.router import make_router


class DisaggregatedWorld:
    def __init__(self, env: simpy.Environment, workload: Workload, deployment: PDDeployment,
                 fast_forward: bool = True, record_steps: bool = True,
                 observer: StepObserver | None = None,
                 progress: Callable[[int], None] | None = None) -> None:
        self.env, self.deployment, self.progress = env, deployment, progress
        # Each pool's steps in a recorder of its own; every request's row in a third, as
        # it leaves (a pool's own rows are not the requests': a prompt handed on finishes
        # on the decode side, where first_scheduled is the decode queue's, not the client's).
        self.prefill_rec = MetricsRecorder(record_steps)
        self.decode_rec = MetricsRecorder(record_steps)
        self.rec = MetricsRecorder(record_steps)
        self._prefill_scheduled: dict[int, float] = {}  # by id: first_scheduled on the prefill side
        self.handoffs = HandOffLog()
        self.homes: list[TieredHome] = []  # each replica's KV tier, in replica order (with [kv_tier])
        dep = deployment
        self.links = LinkQueues(dep.prefill.replicas, dep.decode.replicas)
        self._pick_prefill = make_router(dep.prefill.router)
        self._pick_decode = make_router(dep.decode.router)
        self._waiting_for_decode: dict[int, Request] = {}  # by id: requests in the prefill pool
        self._in_flight: list[float] = []  # arrival times of KV transfers under way (a heap)
        self.arrivals = Arrivals(env, workload, self._to_prefill)
        closed = self.arrivals.closed_loop
        pulled = self.arrivals if self.arrivals.pulled else None
        prefill_next = self.arrivals.next_time
        if closed:  # a reply on any decode replica may send a request at any moment
            prefill_next = lambda: env.now  # noqa: E731
        # Layer-wise transfers start within a prompt's last prefill step: its length is
        # watched (a prefill replica never fast-forwards: its replies are one token).
        self._last_step = [0.0] * dep.prefill.replicas
        watch = self._watch(observer) if dep.transfer.layers else observer
        self.prefill = [self._replica(dep.prefill, i, self.prefill_rec,
                                      lambda seq, i=i: self._prefilled(seq, i),
                                      prefill_next if fast_forward else None, watch, pulled)
                        for i in range(dep.prefill.replicas)]
        p = dep.prefill.replicas
        # Closed loop with several decode replicas: a reply on one may send a request
        # whose KV reaches another at any moment (one replica's own replies end its runs).
        decode_next = (lambda: env.now) if closed and dep.decode.replicas > 1 else self._next_handoff
        self.decode = [self._replica(dep.decode, p + j, self.decode_rec,
                                     lambda seq, i=p + j: self._decoded(seq, i),
                                     decode_next if fast_forward else None, observer, None)
                       for j in range(dep.decode.replicas)]
        # A request the decode pool cannot serve is refused before its prefill runs.
        self._decode_check = self.decode[0].scheduler

    def _replica(self, pool: Pool, index: int, rec: MetricsRecorder, on_done, next_arrival,
                 observer, pulled) -> Replica:
        window = attention_window(pool.cost)
        if window and pool.replicas > 1:  # stepped, as sim/simulate.py says why
            next_arrival = None
        replica = Replica(self.env, index, make_scheduler(pool.scheduler, pool.num_kv_blocks), pool.cost,
                          rec, on_done, next_arrival, observer, closed_loop=self.arrivals.closed_loop,
                          window=window, pulled=pulled)
        tier = pool.kv_tier
        if tier is not None:  # a tier of its own, as sim/simulate.py gives each replica
            kind = HandOffTier if pool is self.deployment.decode else TieredHome
            home = kind(tier, pool.kv_bytes_per_token, pool.scheduler.block_size,
                        lone_prefill_seconds(pool.cost) if tier.preemption == "cheapest" else None)
            replica.scheduler.use_kv_home(home)
            replica.step_note = home.note
            self.homes.append(home)
        return replica

    def _watch(self, observer: StepObserver | None) -> StepObserver:
        def watch(index: int, start: float, seconds: float, batch) -> None:
            self._last_step[index] = seconds
            if observer is not None:
                observer(index, start, seconds, batch)
        return watch

    # -- the request's way through ----------------------------------------------------
    def _to_prefill(self, request: Request, now: float) -> None:
        reason = self._decode_check.reject_reason(request)
        if reason:
            seq = Sequence(request)
            seq.status, seq.reject_reason, seq.finish = Status.REJECTED, reason, now
            self.rec.record_requests([seq], self.decode[0].index)
            self._left(seq)
            return
        if request.output_len > 1:
            self._waiting_for_decode[request.id] = request
        self._pick_prefill(self.prefill, request).submit(prefill_request(request), now)

    def _prefilled(self, seq: Sequence, p: int) -> None:
        """A prefill replica is done with `seq`: hand it on, or record where it ended."""
        request = self._waiting_for_decode.pop(seq.id, None)
        if request is None or seq.status is not Status.FINISHED:
            self.rec.record_requests([seq], p)  # a one-token reply, or refused by the prefill pool
            self._left(seq)
            return
        replica = self._pick_decode(self.decode, request)
        replica.outstanding += 1  # on its way: the router counts it from now
        transfer = self.deployment.transfer
        tokens = request.prompt_len
        d = replica.index - len(self.prefill)
        ready, not_before = transfer.window(tokens, seq.finish, self._last_step[p])
        sent, arrived = self.links.reserve(p, d, ready, transfer.seconds(tokens), not_before)
        self.handoffs.add(request.id, p, replica.index, seq.finish, sent, arrived, transfer.nbytes(tokens))
        heapq.heappush(self._in_flight, arrived)
        handed = decode_sequence(seq, request)
        self._prefill_scheduled[seq.id] = seq.first_scheduled
        event = urgent(self.env, max(0.0, arrived - self.env.now))
        event.callbacks.append(lambda _e: self._arrived(replica, handed))

    def _arrived(self, replica: Replica, seq: Sequence) -> None:
        heapq.heappop(self._in_flight)
        replica.outstanding -= 1  # submit_sequence counts it again
        replica.submit_sequence(seq, self.env.now)

    def _decoded(self, seq: Sequence, index: int) -> None:
        """A decode replica is done with `seq` (finished, or refused): its row, with the
        decode queue's admission noted and the client's first_scheduled put back."""
        self._client_row(seq)
        self.rec.record_requests([seq], index)
        self._left(seq)

    def _client_row(self, seq: Sequence) -> None:
        if seq.first_scheduled >= 0:
            self.handoffs.admitted[seq.id] = seq.first_scheduled
        seq.first_scheduled = self._prefill_scheduled.pop(seq.id, seq.first_scheduled)

    def _left(self, seq: Sequence) -> None:
        self.arrivals.done(seq)
        if self.progress is not None:
            self.progress(1)

    def _next_handoff(self) -> float:
        """The earliest time a request may still reach the decode pool."""
        first = self._in_flight[0] if self._in_flight else math.inf
        if any(r.outstanding for r in self.prefill):
            return min(first, self.env.now)
        return min(first, self.arrivals.next_time())

    def unfinished(self) -> None:
        """Rows for what is still in either pool (an interrupted run)."""
        for e in (*self.prefill, *self.decode):
            seqs = [*e.scheduler.running, *e.scheduler.waiting()]
            if e.index >= len(self.prefill):
                for seq in seqs:
                    self._client_row(seq)
            self.rec.record_requests(seqs, e.index)
