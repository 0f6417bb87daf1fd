"""The building blocks a policy's schedule() is made of: the waiting queue and admission
of its head (prefix caching and KV brought in from elsewhere included), and reserving KV
blocks for the running sequences, preempting when they run out.

A native base of Scheduler (core/schedulers/base.py, the contract and the lifecycle of
a sequence): compiled, the two call each other natively, and a policy still extends one
class (a mixin would be called through Python)."""
from __future__ import annotations

import heapq

from mypy_extensions import mypyc_attr

from batchlab.core.batch import Batch
from batchlab.core.config import SchedulerConfig
from batchlab.core.decode_group import DecodeGroup
from batchlab.core.emission import ONE_TOKEN
from batchlab.core.kv import BlockManager
from batchlab.core.kv_home import RECOMPUTE, KVHome
from batchlab.core.kv_reservation import make_reservation
from batchlab.core.orders import ADMISSION_ORDERS, VICTIM_ORDERS, lookup
from batchlab.core.prefix_cache import block_keys
from batchlab.core.request import Request, Sequence, Status


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled: Scheduler and policies extend it
class Mechanics:
    def __init__(self, config: SchedulerConfig, kv: BlockManager, token_budget: int | None,
                 prefix_caching: bool) -> None:
        self.config = config
        self.kv = kv
        self.max_seqs = config.max_num_seqs
        # Read a few times a decision: through the pydantic model, ~360 instructions a read.
        self._token_budget = token_budget
        self._admission_key = lookup(ADMISSION_ORDERS, config.admission, "admission order").key
        victims = lookup(VICTIM_ORDERS, config.preemption, "preemption victim order")
        self._victim_key = victims.key
        self._victims_as_admitted = victims.admission_ordered  # running list already in order
        self.reservation = make_reservation(config.kv_allocation, kv)
        self._waiting: list[tuple[tuple, int, Sequence]] = []  # heap by admission key
        self._pushes = 0  # heap tie-break: duplicate keys never compare Sequences
        self.running: list[Sequence] = []  # in admission order
        self._admissions = 0
        self.num_preemptions = 0
        self._num_prefilling = 0  # running sequences not yet decoding (seq.decoding False)
        self.group: DecodeGroup | None = None  # see Scheduler.keep_decodes_in_group
        # Tokens a decode runs: the emission's width (Scheduler.use_emission sets it), kept
        # natively: read every step, and through the emission's attribute it costs
        # measurably more (benchmarks/bench_instructions.py).
        self._width = ONE_TOKEN.width
        self.kv_home: KVHome = RECOMPUTE  # where a preempted sequence's KV goes (core/kv_home.py)
        self._tiered = False  # the home has a tier of its own (Scheduler.use_kv_home)
        self._far: tuple[Sequence | None, int] = (None, 0)  # the head's tokens in that tier
        self.prefix_caching = prefix_caching
        # Over every admission (a recompute looks up again, as in vLLM): prompt-side
        # tokens looked up, and how many of them were found cached.
        self.prefix_queries = self.prefix_hits = 0
        self._hit: tuple[Sequence | None, list[int]] = (None, [])  # the head's lookup

    def holds_back(self, seq: Sequence) -> bool:
        """A policy's own reason to keep the head of the queue waiting although it fits
        (nobody overtakes it). For fast-forward it must stay True while decode steps run
        and nothing arrives or finishes (e.g. it may read KV use, which only grows then),
        and must read no clock."""
        return False

    @property
    def token_budget(self) -> int | None:
        return self._token_budget

    # -- the waiting queue -------------------------------------------------------------
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
        self.reservation.hold(seq)
        self._admissions += 1
        if seq.first_scheduled < 0:
            seq.first_scheduled = now
        self.running.append(seq)
        return seq

    # -- prefix caching --------------------------------------------------------------
    def _keys(self, seq: Sequence) -> tuple[int, ...]:
        if seq.block_keys is None:
            seq.block_keys, unit = block_keys(seq.request, self.kv.block_size)
            if seq.block_keys:
                self.kv.set_unit(unit)
        return seq.block_keys

    def _head_prefill(self) -> tuple[Sequence, int]:
        """The head of the waiting queue and the tokens it must compute to catch up:
        all it knows, less its longest cached prefix (looked up now, for _admit_head) or
        the KV it holds elsewhere, whichever covers more."""
        head = self._waiting[0][2]
        if not self.prefix_caching:
            return head, head.known - head.kv_elsewhere
        keys = self._keys(head)
        hit = self.kv.cached_prefix(keys, head.known) if keys else []
        self._hit = (head, hit)
        cached, elsewhere = len(hit) * self.kv.block_size, head.kv_elsewhere
        if self._tiered and keys:  # the lookup goes on in the home's tier (core/kv_tiers/)
            u, span = self.kv.unit, self.kv.block_size * self.kv.unit
            far = self.kv_home.prefix_tokens(keys, len(hit) // u, min(len(keys), (head.known - 1) // span), span)
            self._far = (head, far)
            if far > elsewhere:
                elsewhere = far
        return head, head.known - (cached if cached > elsewhere else elsewhere)

    def cached_prefix_tokens(self, request: Request) -> int:
        """Prompt tokens of `request` this replica holds cached now (for a router)."""
        if not self.prefix_caching:
            return 0
        keys, unit = block_keys(request, self.kv.block_size)
        if not keys or unit != self.kv.unit:
            return 0
        return len(self.kv.cached_prefix(keys, request.prompt_len)) * self.kv.block_size

    def _admit_head(self, batch: Batch, now: float, n: int, fits: int | None = None) -> bool:
        """Admit the head of the waiting queue with n tokens in this step, if the KV
        blocks for `fits` tokens (default n) beyond its cached prefix (_head_prefill)
        are free now. If not, nobody is admitted: order is kept, nobody overtakes."""
        head = self._waiting[0][2]
        who, hit = self._hit
        if who is not head:
            hit = []
        self._hit = (None, [])
        cached = len(hit) * self.kv.block_size
        far = 0
        if self._tiered:
            far_of, far = self._far
            self._far = (None, 0)
            if far_of is not head or who is not head:
                far = 0
        elsewhere = head.kv_elsewhere if head.kv_elsewhere > far else far
        loaded = elsewhere - cached if elsewhere > cached else 0
        if not self.kv.can_admit(hit, cached + loaded + (n if fits is None else fits)):
            return False
        if not self.reservation.fits(head) or self.holds_back(head):
            return False
        seq = self._admit(now)
        if self.prefix_caching:
            self.prefix_queries += seq.known
            self.prefix_hits += cached
            if seq.preemptions == 0:
                seq.cached_tokens = cached
            if hit:
                self.kv.reuse(seq.block_table, hit)
                seq.num_computed = cached
        if elsewhere:  # its KV comes in beside the cached prefix: computed, not run
            seq.num_computed = cached + loaded
            batch.kv_loaded += loaded
            if self._tiered:
                self.kv_home.loaded(seq, loaded)
            seq.kv_elsewhere = 0
        self.kv.grow(seq.block_table, cached + loaded + n)
        if far > cached:  # prefix units loaded from the tier are cached on the GPU again
            span = self.kv.block_size * self.kv.unit
            self.kv.register(seq.block_table, self._keys(seq), cached // span, far // span)
        batch.add(seq, n)
        return True

    # -- the running sequences' KV blocks ----------------------------------------------
    def _preempt(self, seq: Sequence, batch: Batch) -> None:
        """Preemption: free its blocks and go back to waiting with the KV its home keeps
        elsewhere (none by default: progress reset, recomputed when it runs again)."""
        kept = self.kv_home.evicted(seq)
        if not 0 <= kept <= seq.num_computed:
            raise ValueError(f"{type(self.kv_home).__name__}.evicted kept {kept} tokens of "
                             f"{seq.num_computed} computed; expected 0 to {seq.num_computed}")
        self.kv.free(seq.block_table)
        self.reservation.release(seq)
        seq.kv_elsewhere = kept
        batch.kv_saved += kept
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
        if self._victims_as_admitted:
            return self.running[:]  # already in admission order
        return sorted(self.running, key=self._victim_key)

    def _reserve_decodes(self, batch: Batch, queue: list[Sequence]) -> int:
        """The common case in bulk: the leading decoding sequences of `queue` (all of
        them, usually) each decode one token, as the general loop would give them.
        Returns how many it reserved: 0 if KV memory is short, so that the general loop
        preempts. A running sequence's table covers its cached tokens, so one more token
        needs at most one more block. Only for one-token decodes (a width-1 emission):
        wider ones go through the general loop."""
        if self._width != 1:
            return 0
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

    def _reserve_group(self, batch: Batch) -> list[Sequence] | None:
        """The decode group's step, as _reserve_decodes would reserve it: every decoder
        decodes, and they all come before the other running sequences in protection
        order. Returns the others, in that order, for the general loop; None (with the
        group released) when that does not hold or KV memory is short, so that the
        general loop decides (and preempts) as in eager mode."""
        group, running, p = self.group, self.running, self._num_prefilling
        assert group is not None  # called only when keeping decodes in a group
        budget = self.token_budget
        leads = (not p or (self._victims_as_admitted
                           and not any(s.decoding for s in running[-p:])))
        if not (leads and len(running) - p <= (budget or len(running))):
            if group.size:
                group.release()
            return None
        if group.size != len(running) - p:  # decoders left outside by an eager step
            group.release()
            for seq in running:
                if seq.decoding:
                    group.join(seq)
        if not group.size:
            return None
        if group.window and not group.gaps_as_stepped():
            group.release()
            return None
        if not group.reserve(self.kv):
            group.release()
            return None
        batch.group, batch.group_decodes, batch.group_kv = group, group.size, group.kv_sum
        if group.window:
            batch.group_window = group.window_read()
        batch.group_fresh, group.fresh = group.fresh, []
        batch.total_tokens += group.size
        return running[-p:] if p else []

    def _reserve_running(self, batch: Batch, tokens_for) -> bool:
        """Give each running sequence (most protected first) the blocks for its share
        of this step, preempting from the unprotected end when memory runs out.

        `tokens_for(seq)` returns how many tokens seq runs this step (0 to skip and stop);
        for a decoding sequence it must be decode_width() while the token budget allows.
        Returns True if anything was preempted."""
        queue = self._reserve_group(batch) if self.group is not None and batch.is_empty else None
        i = 0
        if queue is None:
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
