"""The scheduler contract and the bookkeeping every policy shares.

Contract: `add(request, now)`, `schedule(now) -> Batch`, `complete(batch, now) ->
finished`. Deterministic given its inputs: no wall clock, no unseeded randomness.
KV blocks come from a BlockManager; running out means preemption by recompute
(the victim frees all its blocks and re-prefills later), never an exception."""
from __future__ import annotations

import heapq
from itertools import accumulate
from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from core.batch import Batch
from core.config import SchedulerConfig
from core.fast_forward import block_steps, kv_steps
from core.kv import BlockManager, blocks_for
from core.policies import ADMISSION_ORDERS, VICTIM_ORDERS, lookup
from core.request import Request, Sequence, Status


class Scheduler(ABC):
    name: ClassVar[str]
    # Fast-forward contract. If schedule() returns a batch in which every running
    # sequence decodes one token and nothing was preempted, then, as long as nothing
    # arrives, schedule() keeps returning exactly that composition until a sequence
    # finishes or KV memory runs short (admission that failed keeps failing, since free
    # memory only shrinks; no decision depends on `now`); and when a sequence finishes
    # while nobody waits (or, for a policy that admits only into an empty batch, while
    # others still run), it returns the same composition less the finished ones. The
    # simulator then advances over such runs in one event. A policy that cannot
    # promise this sets False and is simulated step by step.
    fast_forward: ClassVar[bool] = True
    # Whether an arrival can join while sequences run (False for static batching).
    admits_while_running: ClassVar[bool] = True
    # Tokens per step when max_num_batched_tokens is not set (None: no budget).
    default_token_budget: ClassVar[int | None] = None

    def __init__(self, config: SchedulerConfig, kv: BlockManager) -> None:
        self.config = config
        self.kv = kv
        self.max_seqs = config.max_num_seqs
        self._admission_key = lookup(ADMISSION_ORDERS, config.admission, "admission order")
        self._victim_key = lookup(VICTIM_ORDERS, config.preemption, "preemption victim order")
        self._waiting: list[tuple[tuple, int, Sequence]] = []  # heap by admission key
        self._pushes = 0  # heap tie-break: duplicate keys never compare Sequences
        self.running: list[Sequence] = []  # in admission order
        self.rejected: list[Sequence] = []
        self._admissions = 0
        self.num_preemptions = 0
        self._num_prefilling = 0  # running sequences not yet decoding (seq.decoding False)

    # -- the contract --------------------------------------------------------------
    def add(self, request: Request, now: float) -> Sequence:
        seq = Sequence(request)
        reason = self.reject_reason(request)
        if reason:
            seq.status, seq.reject_reason, seq.finish = Status.REJECTED, reason, now
            self.rejected.append(seq)
        else:
            self._push(seq)
        return seq

    @abstractmethod
    def schedule(self, now: float) -> Batch:
        """Form the next step. An empty batch means nothing can run until an arrival
        (or `next_wakeup`)."""

    def complete(self, batch: Batch, now: float) -> list[Sequence]:
        """Advance token counters after the step ran; free finished sequences.
        Sets batch.sampled: which items produced a new token in this step."""
        finished = []
        b = batch.bulk_decodes
        sampled = batch.sampled
        sampled[:] = [True] * b
        for seq in batch.seqs[:b]:  # the common case, kept lean: decodes all sample
            seq.num_computed += 1
            seq.num_generated += 1
            if seq.num_generated >= seq.request.output_len:
                finished.append(seq)
        for i in range(b, len(batch.seqs)):
            seq = batch.seqs[i]
            seq.num_computed += batch.num_tokens[i]
            sampled.append(seq.num_computed == seq.request.prompt_len + seq.num_generated)
            if sampled[-1]:
                if not seq.decoding:
                    seq.decoding = True
                    self._num_prefilling -= 1
                seq.num_generated += 1
                if seq.done:
                    finished.append(seq)
        self.retire(finished, now)
        return finished

    def has_work(self) -> bool:
        return bool(self._waiting or self.running)

    def next_wakeup(self, now: float) -> float | None:
        """When an idle scheduler would act with no new arrival (None: only on arrival)."""
        return None

    @property
    def token_budget(self) -> int | None:
        return self.config.max_num_batched_tokens or self.default_token_budget

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def waiting(self) -> list[Sequence]:
        """The waiting queue in admission order (a copy, for inspection)."""
        return [e[2] for e in sorted(self._waiting, key=lambda e: e[:2])]

    # -- fast-forward ------------------------------------------------------------------
    def steady_decode_run(self, batch: Batch, through_finishes: bool) -> tuple[list[int], int, int] | None:
        """For a batch where every running sequence decodes: (remaining, k, sensitive_from).

        remaining[i]: tokens batch.seqs[i] has left. Provided nothing arrives, the next k
        steps (this one included) each decode one token of every member not yet
        finished, and nothing else, with KV memory to spare. Finishes end the run (k is
        the first one's step) unless through_finishes and a finish cannot let anyone in
        (nobody waits, or the policy admits only into an empty batch). Steps from
        sensitive_from on could admit an arrival (a seat is free by then): they may
        only run if they start before it. KV memory is not checked here: see
        kv_steps(). None: step normally."""
        seqs = batch.seqs
        if not (self.fast_forward and batch.decode_only):
            return None
        remaining = [s.request.output_len - s.num_generated for s in seqs]
        first = min(remaining)
        through = through_finishes and (not self._waiting or not self.admits_while_running)
        k = max(remaining) if through else first
        seat_free = self.admits_while_running and len(self.running) < self.max_seqs
        # After a finish a seat is free; even a policy that cannot use it then must not
        # run past an arrival, so that a router sees this replica as stepping would.
        return remaining, k, 1 if seat_free else min(first + 1, k + 1)

    def kv_steps(self, batch: Batch, remaining: list[int], m: int) -> int:
        """How many of steps 1..m of a steady run KV memory allows (at least 1)."""
        bs, free = self.kv.block_size, self.kv.num_free
        # Each sequence needs at most ceil((m-1)/bs) more blocks over steps 2..m; only
        # when that bound does not fit is the exact count worth computing.
        if m > 1 and len(batch.seqs) * -(-(m - 1) // bs) > free:
            m = kv_steps(np.array(batch.starts, np.int64),
                         np.array([len(s.block_table) for s in batch.seqs], np.int64), bs, free,
                         m, np.array(remaining, np.int64))
        return m

    def advance_decodes(self, batch: Batch, m: int, remaining: list[int]
                        ) -> tuple[list[int], list[tuple[Sequence, int]]]:
        """Apply steps 1..m of a steady run (m <= k of steady_decode_run) as m
        schedule/complete rounds would, except that finished sequences stay running
        until retire(): returns them with the step they finish at. Also returns the KV
        blocks in use at each step, after its allocation. (Block ids may differ from
        stepping's, since each sequence takes its blocks at once; counts, and so
        everything a run reports, are the same.)"""
        bs, kv = self.kv.block_size, self.kv
        freed = [0] * (m + 2)  # blocks given back after each step
        growing, done = [], []  # (table, first step needing a block, new blocks)
        for s, r in zip(batch.seqs, remaining):
            a = r if r < m else m  # steps this sequence takes part in
            # Step j processes position num_computed + j - 1; the table covers
            # len(table) * bs positions, so the first new block is needed at step f.
            f = len(s.block_table) * bs - s.num_computed + 1
            new = (a - f) // bs + 1 if f <= a else 0
            if new:
                growing.append((s.block_table, f, new))
            s.num_computed += a
            s.num_generated += a
            if r <= m:
                done.append((s, r))
                freed[r + 1] += len(s.block_table) + new
        used = kv.num_used
        blocks, at = kv.take(sum(g[2] for g in growing)), 0
        for table, _, n in growing:
            table.extend(blocks[at:at + n])
            at += n
        taken = block_steps([g[1] for g in growing], [g[2] for g in growing], bs, m)
        return list(accumulate((t - f for t, f in zip(taken, freed[1:m + 1])), initial=used))[1:], done

    def retire(self, done: list[Sequence], at: float | list[float]) -> None:
        """Finish sequences that are done (by complete(), or left by advance_decodes)
        at `at`: one time for all, or one each. Frees their KV blocks."""
        times = at if isinstance(at, list) else [at] * len(done)
        for seq, now in zip(done, times):
            seq.status, seq.finish = Status.FINISHED, now
            self.kv.free(seq.block_table)
        self._drop_running(done)

    # -- shared mechanics ----------------------------------------------------------
    def _drop_running(self, gone: list[Sequence]) -> None:
        """Take finished sequences out of the running list, keeping its order."""
        if len(gone) <= 4:  # the usual one or two: a C-level scan each beats a rebuild
            for seq in gone:
                self.running.remove(seq)
        else:
            self.running = [s for s in self.running if s.status is Status.RUNNING]

    def reject_reason(self, request: Request) -> str:
        need = blocks_for(request.max_kv_tokens, self.kv.block_size)
        if need > self.kv.num_blocks:
            return (f"needs {need} KV blocks (prompt+output-1 = {request.max_kv_tokens} tokens) "
                    f"but the cache has {self.kv.num_blocks}")
        return ""

    def _push(self, seq: Sequence) -> None:
        heapq.heappush(self._waiting, (self._admission_key(seq), self._pushes, seq))
        self._pushes += 1

    def _peek(self) -> Sequence | None:
        return self._waiting[0][2] if self._waiting else None

    def _admit(self, now: float) -> Sequence:
        seq = heapq.heappop(self._waiting)[2]
        seq.status = Status.RUNNING
        seq.decoding = False
        self._num_prefilling += 1
        seq.admit_order = self._admissions
        self._admissions += 1
        if seq.first_scheduled < 0:
            seq.first_scheduled = now
        self.running.append(seq)
        return seq

    def _admit_head(self, batch: Batch, now: float, n: int) -> bool:
        """Admit the head of the waiting queue with n tokens in this step, if its KV
        blocks fit. If not, nobody is admitted: order is kept, nobody overtakes."""
        head = self._peek()
        if not self.kv.can_grow(head.block_table, n):
            return False
        seq = self._admit(now)
        self.kv.grow(seq.block_table, n)
        batch.add(seq, n)
        return True

    def _preempt(self, seq: Sequence, batch: Batch) -> None:
        """Recompute preemption: drop all KV, go back to waiting with progress reset."""
        self.kv.free(seq.block_table)
        seq.num_computed = 0
        seq.status = Status.WAITING
        if not seq.decoding:
            self._num_prefilling -= 1
        seq.decoding = False
        seq.preemptions += 1
        self.num_preemptions += 1
        self.running.remove(seq)
        batch.preempted.append(seq)
        self._push(seq)

    def _by_protection(self) -> list[Sequence]:
        """Running sequences, most protected first (victims are taken from the end)."""
        if self.config.preemption == "recent":
            return self.running[:]  # already in admission order
        return sorted(self.running, key=self._victim_key)

    def _reserve_decodes(self, batch: Batch, queue: list[Sequence]) -> int:
        """The common case in bulk: the leading decoding sequences of `queue` (all of
        them, usually) each decode one token, as the general loop would give them.
        Returns how many it reserved: 0 if KV memory is short, so that the general loop
        preempts. A running sequence's table covers its cached tokens, so one more token
        needs at most one more block."""
        p = len(queue)
        if self._num_prefilling:
            p = next(i for i, s in enumerate(queue) if not s.decoding)
        p = min(p, self.token_budget or p)
        lead = queue[:p]
        bs = self.kv.block_size
        short = [s for s in lead if s.num_computed >= len(s.block_table) * bs]
        if not p or len(short) > self.kv.num_free:
            return 0
        for seq, block in zip(short, self.kv.take(len(short))):
            seq.block_table.append(block)
        batch.seqs, batch.num_tokens = lead, [1] * p
        batch.starts = [s.num_computed for s in lead]
        batch.total_tokens = batch.bulk_decodes = p
        return p

    def _reserve_running(self, batch: Batch, tokens_for) -> bool:
        """Give each running sequence (most protected first) the blocks for its share
        of this step, preempting from the unprotected end when memory runs out.

        `tokens_for(seq)` returns how many tokens seq runs this step (0 to skip and stop);
        for a decoding sequence it must be 1 while the token budget allows.
        Returns True if anything was preempted."""
        queue = self._by_protection()
        i = self._reserve_decodes(batch, queue) if batch.is_empty else 0
        kv, bs = self.kv, self.kv.block_size
        preempted = False
        while i < len(queue):  # the hot loop of the simulator: kept lean
            seq = queue[i]
            n = tokens_for(seq)
            if n <= 0:
                break
            need = -(-(seq.num_computed + n) // bs) - len(seq.block_table)
            while need > 0 and need > kv.num_free:
                victim = queue.pop() if len(queue) - 1 > i else queue.pop(i)
                self._preempt(victim, batch)
                preempted = True
                if victim is seq:
                    break
            else:
                if need > 0:
                    seq.block_table.extend(kv.take(need))
                batch.add(seq, n)
                i += 1
        return preempted
