"""What one engine step runs (a Batch) and the features a cost model prices it by."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, NamedTuple

from core.request import Sequence

if TYPE_CHECKING:
    from core.decode_group import DecodeGroup


@dataclass(slots=True)
class Batch:
    """One step: sequence i processes tokens [starts[i], starts[i] + num_tokens[i]).

    A prefill chunk has num_tokens >= 1 from wherever its prefill stands; a decode has
    exactly one token, the last one generated. `preempted` lists sequences evicted
    (recompute) while forming this step; they are back in the waiting queue."""

    seqs: list[Sequence] = field(default_factory=list)
    num_tokens: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    total_tokens: int = 0
    sampled: list[bool] = field(default_factory=list)  # set by Scheduler.complete
    # The first bulk_decodes items are decodes of running sequences, added in bulk by
    # the scheduler, so the hot loops need not check them item by item.
    bulk_decodes: int = 0
    # Besides the listed items, one decode of each of the group_decodes members of a
    # DecodeGroup (the simulator's lazy form of bulk decodes), reading group_kv cached
    # tokens in all; group_fresh: those that joined since the group's last step.
    group: DecodeGroup | None = None
    group_decodes: int = 0
    group_kv: int = 0
    group_fresh: list[Sequence] = field(default_factory=list)

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


FEATURE_NAMES = ("num_seqs", "num_prefill_seqs", "prefill_tokens", "decode_tokens",
                 "kv_tokens_read", "attention_pairs")


class StepFeatures(NamedTuple):
    """The shape of a step, all a cost model may look at. (A named tuple: the simulator
    builds one per step, or per stretch of a fast-forward run, so it must be cheap.)

    kv_tokens_read: KV slots attention reads, summed over sequences (context + new).
    attention_pairs: (query, key) pairs attended, causal: a chunk of c tokens after s
    cached ones attends c*s + c(c+1)/2 pairs; a decode token attends s + 1."""

    num_seqs: int = 0
    num_prefill_seqs: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    kv_tokens_read: int = 0
    attention_pairs: int = 0

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens


def step_features(batch: Batch) -> StepFeatures:
    b, g = batch.bulk_decodes, batch.group_decodes
    # A decode token attends its context plus itself.
    kv_read = pairs = (sum(batch.starts[:b]) + b if b else 0) + (batch.group_kv + g if g else 0)
    prefill_seqs = prefill = 0
    decode = b + g
    for i in range(b, len(batch.seqs)):
        seq, s, c = batch.seqs[i], batch.starts[i], batch.num_tokens[i]
        kv_read += s + c
        pairs += c * s + c * (c + 1) // 2
        # A decode: one token, the last one generated.
        if c == 1 and seq.num_generated > 0 and s == seq.request.prompt_len + seq.num_generated - 1:
            decode += 1
        else:
            prefill_seqs += 1
            prefill += c
    return StepFeatures(len(batch.seqs) + g, prefill_seqs, prefill, decode, kv_read, pairs)
