"""The scheduler contract and the lifecycle every policy shares.

Contract: `add(request, now)`, `schedule(now) -> Batch`, `complete(batch, now) ->
finished`. Deterministic given its inputs: no wall clock, no unseeded randomness.
KV blocks come from a BlockManager; running out means preemption (the victim frees all
its blocks; its KV home, core/kv_home.py, keeps what it keeps elsewhere, by default
nothing: it re-prefills later), never an exception. The building blocks of schedule()
(admitting the head, reserving the running) are its native base, core/schedulers/mechanics.py."""
from __future__ import annotations

import heapq
from typing import ClassVar

from mypy_extensions import mypyc_attr

from batchlab.core.batch import Batch
from batchlab.core.config import SchedulerConfig
from batchlab.core.decode_group import DecodeGroup
from batchlab.core.emission import ONE_TOKEN, Emission
from batchlab.core.kv import BlockManager, blocks_for
from batchlab.core.kv_home import KVHome
from batchlab.core.params import PolicyParams, validate_params
from batchlab.core.request import Request, Sequence, Status
from batchlab.core.schedulers.mechanics import Mechanics


# Compiled (setup.py), a class that a policy's own module may subclass must say so.
@mypyc_attr(allow_interpreted_subclasses=True)
# Not an ABC: compiled, ABCMeta's subclass cache is shared by every native class, and
# isinstance(a memory_aware scheduler, ChunkedPrefillScheduler) came out True.
class Scheduler(Mechanics):
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
        self.params = validate_params(self.name, self.Params, config.params)
        pc = config.prefix_caching
        super().__init__(config, kv, config.max_num_batched_tokens or self.default_token_budget,
                         type(self).prefix_caching_default if pc is None else pc)
        self.rejected: list[Sequence] = []
        self.emission: Emission = ONE_TOKEN  # tokens a decode runs and keeps (core/emission.py)

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

    def has_work(self) -> bool:
        return bool(self._waiting or self.running)

    def next_wakeup(self, now: float) -> float | None:
        """When an idle scheduler would act with no new arrival (None: only on arrival)."""
        return None

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
