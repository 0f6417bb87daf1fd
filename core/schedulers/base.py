"""The scheduler contract and the bookkeeping every policy shares.

Contract: `add(request, now)`, `schedule(now) -> Batch`, `complete(batch, now) ->
finished`. Deterministic given its inputs: no wall clock, no unseeded randomness.
KV blocks come from a BlockManager; running out means preemption (the victim frees all
its blocks; its KV home, core/kv_home.py, keeps what it keeps elsewhere, by default
nothing: it re-prefills later), never an exception.

One class on purpose, past 400 lines: compiled (mypyc), its hot methods call each other
natively, and policies extend it as one native base (mixins would be called through
Python)."""
from __future__ import annotations

import heapq
from typing import ClassVar

from mypy_extensions import mypyc_attr

from batchlab.core.batch import Batch
from batchlab.core.config import SchedulerConfig
from batchlab.core.decode_group import DecodeGroup
from batchlab.core.emission import ONE_TOKEN, Emission
from batchlab.core.kv import BlockManager, blocks_for
from batchlab.core.kv_home import RECOMPUTE, KVHome
from batchlab.core.kv_reservation import make_reservation
from batchlab.core.orders import ADMISSION_ORDERS, VICTIM_ORDERS, lookup
from batchlab.core.params import PolicyParams, validate_params
from batchlab.core.prefix_cache import block_keys
from batchlab.core.request import Request, Sequence, Status


# Compiled (setup.py), a class that a policy's own module may subclass must say so.
@mypyc_attr(allow_interpreted_subclasses=True)
# Not an ABC: compiled, ABCMeta's subclass cache is shared by every native class, and
# isinstance(a memory_aware scheduler, ChunkedPrefillScheduler) came out True.
class Scheduler:
    name: ClassVar[str]
    description: ClassVar[str] = ""  # one line for the listings (default: the docstring's)
    # The policy's parameters: a PolicyParams subclass; values arrive as self.params.
    Params: ClassVar[type[PolicyParams]] = PolicyParams
    # Fast-forward contract. If schedule() returns a batch in which every running
    # sequence decodes one token and nothing was preempted, then, as long as nothing
    # arrives, schedule() keeps returning exactly that composition until a sequence
    # finishes or KV memory runs short (admission that failed keeps failing, since free
    # memory only shrinks; no decision depends on `now`); and when a sequence finishes
    # while nobody waits (or, for a policy that admits only into an empty batch, while
    # others still run), it returns the same composition less the finished ones. The
    # simulator then advances over such runs in one event, and keeps the running
    # decoders' counters lazily in a DecodeGroup meanwhile (keep_decodes_in_group): such
    # a policy reserves running sequences only through _reserve_running and reads no
    # decoder's counters itself. Each class claims this itself (fast_forward = True in
    # its own body): a subclass that does not is simulated step by step, since it may
    # have changed the very decisions the claim was about.
    fast_forward: ClassVar[bool] = False
    # Whether an arrival can join while sequences run (False for static batching).
    admits_while_running: ClassVar[bool] = True
    # Tokens per step when max_num_batched_tokens is not set (None: no budget).
    default_token_budget: ClassVar[int | None] = None
    # Prefix caching when SchedulerConfig.prefix_caching is None: on, as in vLLM v1,
    # SGLang and TensorRT-LLM; a policy modelling an engine without it says False.
    prefix_caching_default: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.fast_forward = bool(vars(cls).get("fast_forward", False))  # not inherited

    def __init__(self, config: SchedulerConfig, kv: BlockManager) -> None:
        self.config = config
        self.kv = kv
        self.max_seqs = config.max_num_seqs
        # Read a few times a decision: through the pydantic model, ~360 instructions a read.
        self._token_budget = config.max_num_batched_tokens or self.default_token_budget
        self.params = validate_params(self.name, self.Params, config.params)
        self._admission_key = lookup(ADMISSION_ORDERS, config.admission, "admission order").key
        victims = lookup(VICTIM_ORDERS, config.preemption, "preemption victim order")
        self._victim_key = victims.key
        self._victims_as_admitted = victims.admission_ordered  # running list already in order
        self.reservation = make_reservation(config.kv_allocation, kv)
        self._waiting: list[tuple[tuple, int, Sequence]] = []  # heap by admission key
        self._pushes = 0  # heap tie-break: duplicate keys never compare Sequences
        self.running: list[Sequence] = []  # in admission order
        self.rejected: list[Sequence] = []
        self._admissions = 0
        self.num_preemptions = 0
        self._num_prefilling = 0  # running sequences not yet decoding (seq.decoding False)
        self.group: DecodeGroup | None = None  # see keep_decodes_in_group
        self.emission: Emission = ONE_TOKEN  # tokens a decode runs and keeps (core/emission.py)
        # Its width, kept natively: read every step, and through the emission's attribute
        # it costs measurably more (benchmarks/bench_instructions.py). use_emission sets both.
        self._width = ONE_TOKEN.width
        self.kv_home: KVHome = RECOMPUTE  # where a preempted sequence's KV goes (core/kv_home.py)
        self._tiered = False  # the home has a tier of its own (use_kv_home)
        self._far: tuple[Sequence | None, int] = (None, 0)  # the head's tokens in that tier
        pc = config.prefix_caching
        self.prefix_caching = type(self).prefix_caching_default if pc is None else pc
        # Over every admission (a recompute looks up again, as in vLLM): prompt-side
        # tokens looked up, and how many of them were found cached.
        self.prefix_queries = self.prefix_hits = 0
        self._hit: tuple[Sequence | None, list[int]] = (None, [])  # the head's lookup

    # -- the contract --------------------------------------------------------------
    def add(self, request: Request, now: float) -> Sequence:
        return self.add_sequence(Sequence(request), now)

    def add_sequence(self, seq: Sequence, now: float) -> Sequence:
        """add() for a sequence begun elsewhere: a decode replica receiving a finished
        prefill (its first token sampled, its KV on the way: Sequence.kv_elsewhere)."""
        reason = self.reject_reason(seq.request)
        if reason:
            seq.status, seq.reject_reason, seq.finish = Status.REJECTED, reason, now
            self.rejected.append(seq)
        else:
            self._push(seq)
        return seq

    def schedule(self, now: float) -> Batch:
        """Form the next step. An empty batch means nothing can run until an arrival
        (or `next_wakeup`)."""
        raise NotImplementedError(f"policy {self.name!r} must define schedule()")

    def complete(self, batch: Batch, now: float) -> list[Sequence]:
        """Advance token counters after the step ran; free finished sequences.
        Sets batch.sampled: how many tokens each item emitted in this step (0: none).
        An item that reached the end of what its sequence knows sampled there and at each
        draft after it; the emission says how many of those tokens it keeps."""
        group = batch.group
        finished = group.step() if group is not None and batch.group_decodes else []
        b = batch.bulk_decodes
        sampled = batch.sampled
        # Bulk decodes run one token each (only a width-1 emission reserves them in bulk,
        # _reserve_decodes), and keep it: an emission keeps 1 to `verified` tokens.
        sampled[:] = [1] * b
        for seq in batch.seqs[:b]:  # the common case, kept lean: decodes all sample
            seq.num_computed += 1
            seq.num_generated += 1
            if seq.num_generated >= seq.request.output_len:
                finished.append(seq)
        for i in range(b, len(batch.seqs)):
            seq = batch.seqs[i]
            seq.num_computed += batch.num_tokens[i]
            if seq.block_keys:  # units this chunk filled are computed now: cache them
                span = self.kv.block_size * self.kv.unit
                hi = min(seq.num_computed // span, len(seq.block_keys))
                if hi > batch.starts[i] // span:
                    self.kv.register(seq.block_table, seq.block_keys, batch.starts[i] // span, hi)
            drafts = seq.num_computed - seq.request.prompt_len - seq.num_generated
            if drafts < 0:  # a prefill chunk short of the prompt's end
                sampled.append(0)
                continue
            # One verified position keeps its one token (1 <= kept <= verified): the
            # emission is asked only where drafts ran (a call through Python, compiled).
            kept = self.emission.emitted(seq, drafts + 1) if drafts else 1
            if not 1 <= kept <= drafts + 1:
                raise ValueError(f"{type(self.emission).__name__}.emitted kept {kept} tokens of "
                                 f"{drafts + 1} verified; expected 1 to {drafts + 1}")
            left = seq.request.output_len - seq.num_generated
            if kept > left:  # the reply ends within the kept tokens
                kept = left
            seq.num_computed -= drafts + 1 - kept  # the rejected drafts' KV is dropped
            seq.num_generated += kept
            sampled.append(kept)
            if seq.done:
                finished.append(seq)
            if not seq.decoding:
                seq.decoding = True
                self._num_prefilling -= 1
                if self.group is not None and not seq.done:
                    self.group.join(seq)
        self.retire(finished, now)
        return finished

    def decode_width(self) -> int:
        """Tokens each decoding sequence runs this step: its last token and the
        emission's drafts (1 without drafts). Policies give a decode this many."""
        return self._width

    def use_emission(self, emission: Emission) -> None:
        """Emit by `emission` from the next step on. The decode group and its
        fast-forward take one token per member per step: a wider emission steps."""
        self.emission, self._width = emission, emission.width
        if emission.width != 1 and self.group is not None:
            if self.group.size:
                self.group.release()
            self.group = None

    def use_kv_home(self, home: KVHome) -> None:
        """Keep preempted sequences' KV in `home` from now on; a tiered home (core/kv_tiers/)
        also keeps the prefix units the GPU evicts, and lookups go on into it."""
        self.kv_home, self._tiered = home, home.tiered
        self.kv.cache.on_evict = home.keep if home.tiered and home.holds_prefixes else None

    def holds_back(self, seq: Sequence) -> bool:
        """A policy's own reason to keep the head of the queue waiting although it fits
        (nobody overtakes it). For fast-forward it must stay True while decode steps run
        and nothing arrives or finishes (e.g. it may read KV use, which only grows then),
        and must read no clock."""
        return False

    def has_work(self) -> bool:
        return bool(self._waiting or self.running)

    def next_wakeup(self, now: float) -> float | None:
        """When an idle scheduler would act with no new arrival (None: only on arrival)."""
        return None

    @property
    def token_budget(self) -> int | None:
        return self._token_budget

    @property
    def step_budget(self) -> int:
        """token_budget of a policy that always has one (a default_token_budget)."""
        budget = self.token_budget
        assert budget is not None, f"{self.name}: no default_token_budget"
        return budget

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def waiting(self) -> list[Sequence]:
        """The waiting queue in admission order (a copy, for inspection)."""
        return [e[2] for e in sorted(self._waiting, key=lambda e: e[:2])]

    # -- fast-forward ------------------------------------------------------------------
    def keep_decodes_in_group(self, window: int = 0) -> None:
        """Keep running decoders' counters lazily in a DecodeGroup (the simulator's
        fast-forward mode: steps then cost O(changes), not O(batch); see
        core/decode_group.py); window: the model's sliding window (0: none), whose reads
        the group keeps too. A policy that cannot promise the fast-forward contract
        stays eager."""
        if self.fast_forward and self._width == 1:
            self.group = DecodeGroup(self.kv.block_size, self._victim_key, window)

    def steady_decode_run(self, batch: Batch, through_finishes: bool) -> tuple[int, int] | None:
        """For a batch that is one step of the decode group and nothing else: (k,
        sensitive_from). Provided nothing arrives, the next k steps (this one included)
        each decode one token of every member not yet finished, and nothing else.
        Finishes end the run (k is the first one's step) unless through_finishes and a
        finish cannot let anyone in (nobody waits, or the policy admits only into an
        empty batch). Steps from sensitive_from on could admit an arrival (a seat is
        free by then): they may only run if they start before it. KV memory is not
        checked here: see DecodeGroup.kv_steps. None: step normally."""
        group = self.group
        if group is None or not batch.group_decodes or batch.seqs or batch.preempted:
            return None
        first, last = group.steps_left()
        through = through_finishes and (not self._waiting or not self.admits_while_running)
        k = last if through else first
        seat_free = self.admits_while_running and len(self.running) < self.max_seqs
        # After a finish a seat is free; even a policy that cannot use it then must not
        # run past an arrival, so that a router sees this replica as stepping would.
        return k, 1 if seat_free else min(first + 1, k + 1)

    def retire(self, done: list[Sequence], at: float | list[float]) -> None:
        """Finish sequences that are done (by complete(), or left by DecodeGroup.advance)
        at `at`: one time for all, or one each. Frees their KV blocks."""
        times = at if isinstance(at, list) else [at] * len(done)
        if len(done) > 1 and self.kv.cache.units:
            # Freed cached blocks queue for eviction in freeing order: make that order
            # the same whether the simulator stepped or fast-forwarded.
            pairs = sorted(zip(done, times), key=lambda p: (p[1], p[0].admit_order))
            done, times = [p[0] for p in pairs], [p[1] for p in pairs]
        for seq, now in zip(done, times):
            seq.status, seq.finish = Status.FINISHED, now
            self.kv.free(seq.block_table)
            self.reservation.release(seq)
        self._drop_running(done)

    def abort(self, seq: Sequence, now: float) -> bool:
        """Drop a waiting or running sequence whose client left (call between steps):
        its KV blocks are freed at once. False if it had already finished or left."""
        if seq.status is Status.RUNNING:
            if self.group is not None and self.group.size:
                self.group.release()  # counters back on the members before one leaves
            if not seq.decoding:
                self._num_prefilling -= 1
            self.kv.free(seq.block_table)
            self.running.remove(seq)
        elif seq.status is Status.WAITING and any(e[2] is seq for e in self._waiting):
            if self._tiered and seq.kv_elsewhere:
                self.kv_home.loaded(seq, 0)  # what it kept in the tier is released
            self._waiting = [e for e in self._waiting if e[2] is not seq]
            heapq.heapify(self._waiting)  # a waiting sequence holds no blocks
        else:
            return False
        seq.status, seq.finish = Status.ABORTED, now
        return True

    # -- shared mechanics ----------------------------------------------------------
    def _drop_running(self, gone: list[Sequence]) -> None:
        """Take finished sequences out of the running list, keeping its order."""
        if len(gone) <= 4:  # the usual one or two: a C-level scan each beats a rebuild
            for seq in gone:
                self.running.remove(seq)
        else:
            self.running = [s for s in self.running if s.status is Status.RUNNING]

    def reject_reason(self, request: Request) -> str:
        limit, total = self.config.max_model_len, request.prompt_len + request.output_len
        if limit is not None and total > limit:
            return (f"prompt+output = {total} tokens exceeds max_model_len={limit} "
                    f"(the model's context length unless set)")
        # Its last decode holds its drafts' KV too (width - 1 more: core/emission.py).
        need = blocks_for(request.max_kv_tokens + self._width - 1, self.kv.block_size)
        if need > self.kv.num_blocks:
            drafts = f" and {self._width - 1} drafts" if self._width > 1 else ""
            return (f"needs {need} KV blocks (prompt+output-1 = {request.max_kv_tokens} tokens{drafts}) "
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
