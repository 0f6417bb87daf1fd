"""What one engine step runs (a Batch) and the features a cost model prices it by
(defined in core/features.py, re-exported here)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from batchlab.core.features import (FEATURE_NAMES, StepFeatures, features_of, masked_pairs, window_pairs,
                                    window_reads)
from batchlab.core.request import Sequence

__all__ = ["Batch", "FEATURE_NAMES", "StepFeatures", "StepObserver", "step_features"]

if TYPE_CHECKING:
    from batchlab.core.decode_group import DecodeGroup


class Batch:
    """One step: sequence i processes tokens [starts[i], starts[i] + num_tokens[i]).

    A prefill chunk has num_tokens >= 1 from wherever its prefill stands; a decode starts
    at the last token generated and runs the emission's width (core/emission.py: that
    one token without drafts). `preempted` lists sequences evicted
    (recompute) while forming this step; they are back in the waiting queue.
    (A plain class with its own __init__: compiled, a dataclass's stays interpreted, and
    a batch is made every decision.)"""

    __slots__ = ("seqs", "num_tokens", "starts", "preempted", "total_tokens", "sampled",
                 "bulk_decodes", "group", "group_decodes", "group_kv", "group_window", "group_fresh",
                 "kv_loaded", "kv_saved")

    def __init__(self) -> None:
        self.seqs: list[Sequence] = []
        self.num_tokens: list[int] = []
        self.starts: list[int] = []
        self.preempted: list[Sequence] = []
        self.total_tokens = 0
        self.sampled: list[int] = []  # tokens each item emitted: set by Scheduler.complete
        # The first bulk_decodes items are decodes of running sequences, added in bulk by
        # the scheduler, so the hot loops need not check them item by item.
        self.bulk_decodes = 0
        # Besides the listed items, one decode of each of the group_decodes members of a
        # DecodeGroup (the simulator's lazy form of bulk decodes), reading group_kv cached
        # tokens in all; group_fresh: those that joined since the group's last step.
        self.group: DecodeGroup | None = None
        self.group_decodes = 0
        self.group_kv = 0
        self.group_window = 0  # with a sliding window: their decodes' windowed reads
        self.group_fresh: list[Sequence] = []
        # Tokens of KV the admitted sequences load from elsewhere (core/kv_home.py):
        # counted computed, not run; priced by the KV home, not the cost model.
        self.kv_loaded = 0
        # Tokens of KV the preempted sequences keep elsewhere, moved out in this step.
        self.kv_saved = 0

    def __repr__(self) -> str:
        return (f"Batch({len(self.seqs)} items, {self.total_tokens} tokens, "
                f"{self.group_decodes} group decodes, {len(self.preempted)} preempted)")

    def add(self, seq: Sequence, n: int) -> None:
        self.total_tokens += n
        self.seqs.append(seq)
        self.num_tokens.append(n)
        self.starts.append(seq.num_computed)

    def __len__(self) -> int:
        return len(self.seqs) + self.group_decodes

    @property
    def is_empty(self) -> bool:
        return not self.seqs and not self.group_decodes


# Told of every step, once complete() has run: (replica, start, duration, batch). For
# studies that need more than the step table (which request holds which seat); the
# simulator and the real driver call it at the same point.
StepObserver = Callable[[int, float, float, Batch], None]


def step_features(batch: Batch, after_prefill: int = 0, after_idle: int = 0,
                  window: int = 0) -> StepFeatures:
    """The batch's features; after_prefill and after_idle come from what ran before it
    (core.features.StepHistory); window: the model's sliding window (0: none), which
    sizes the windowed features (the group's decodes read batch.group_window)."""
    b, g = batch.bulk_decodes, batch.group_decodes
    # A decode token attends its context plus itself.
    kv_read = b + (batch.group_kv + g if g else 0)
    starts = batch.starts
    for i in range(b):  # compiled: sum() of a slice is two calls through Python
        kv_read += starts[i]
    pairs = kv_read
    prefill_seqs = prefill = masked = prefill_pairs = self_pairs = 0
    decode = b + g
    for i in range(b, len(batch.seqs)):
        seq, s, c = batch.seqs[i], batch.starts[i], batch.num_tokens[i]
        kv_read += s + c
        pairs += c * s + c * (c + 1) // 2
        masked += masked_pairs(c, s)
        # A decode: from the last token generated on, that token and the emission's
        # drafts (core/emission.py; one token without drafts).
        if seq.num_generated > 0 and s == seq.request.prompt_len + seq.num_generated - 1:
            decode += c
        else:
            prefill_seqs += 1
            prefill += c
            prefill_pairs += c * s + c * (c + 1) // 2
            self_pairs += c * (c + 1) // 2
    if not window:
        return features_of(len(batch.seqs) + g, prefill_seqs, prefill, decode, kv_read, pairs,
                           after_prefill, after_idle, masked, kv_read, pairs, prefill_pairs, self_pairs)
    w_kv = batch.group_window if g else 0
    for i in range(b):  # compiled: sum() of a generator is calls through Python
        w_kv += min(starts[i] + 1, window)
    w_pairs = w_kv
    for i in range(b, len(batch.seqs)):
        s, c = batch.starts[i], batch.num_tokens[i]
        w_kv += window_reads(c, s, window)
        w_pairs += window_pairs(c, s, window)
    return features_of(len(batch.seqs) + g, prefill_seqs, prefill, decode, kv_read, pairs,
                       after_prefill, after_idle, masked, w_kv, w_pairs, prefill_pairs, self_pairs)
