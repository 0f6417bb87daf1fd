"""Requests (immutable) and the per-replica state of a sequence being served."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


@dataclass(frozen=True, slots=True)
class Request:
    """One user request. Generation stops after exactly `output_len` tokens (EOS is
    ignored, as `vllm bench serve --ignore-eos` does), so sim and real do identical work."""

    id: int
    arrival: float  # seconds since the start of the workload
    prompt_len: int
    output_len: int
    prompt_token_ids: tuple[int, ...] | None = None
    priority: int = 0  # lower value = more important (vLLM convention)
    prefix_hashes: tuple[int, ...] | None = None  # hashes of leading prompt blocks
    hash_block_size: int = 512  # tokens each prefix hash covers (Mooncake's 512)

    def __post_init__(self) -> None:
        if self.prompt_len < 1:
            raise ValueError(f"request {self.id}: prompt_len must be >= 1, got {self.prompt_len}")
        if self.output_len < 1:
            raise ValueError(f"request {self.id}: output_len must be >= 1, got {self.output_len}")
        if self.hash_block_size < 1:
            raise ValueError(f"request {self.id}: hash_block_size must be >= 1, got {self.hash_block_size}")
        if not self.arrival >= 0:
            raise ValueError(f"request {self.id}: arrival must be >= 0, got {self.arrival}")
        if self.prompt_token_ids is not None and len(self.prompt_token_ids) != self.prompt_len:
            raise ValueError(
                f"request {self.id}: {len(self.prompt_token_ids)} prompt token ids "
                f"but prompt_len={self.prompt_len}")

    @property
    def max_kv_tokens(self) -> int:
        """KV slots the request needs at its longest: the last output token is never fed
        back, so prompt + output - 1."""
        return self.prompt_len + self.output_len - 1


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    REJECTED = "rejected"
    ABORTED = "aborted"  # its client left before it finished (batchlab serve)
    FAILED = "failed"  # an error ended it alone; reject_reason says which (serve, replay)


@dataclass(slots=True, eq=False)
class Sequence:
    """A request's state on one replica.

    Token bookkeeping, uniform for prefill, chunked prefill, decode and recompute:
    the sequence knows `known = prompt_len + num_generated` tokens; `num_computed` of
    them have their KV in cache. A step processes tokens [num_computed, num_computed+n);
    when that reaches `known`, the step samples one new token.
    """

    request: Request
    status: Status = Status.WAITING
    num_computed: int = 0
    num_generated: int = 0
    block_table: list[int] = field(default_factory=list)
    admit_order: int = -1  # set at each admission; larger = admitted more recently
    decoding: bool = False  # sampled since its last admission: each step now adds one token
    group_tick: int = -1  # >= 0: counters kept lazily by a DecodeGroup since that tick
    preemptions: int = 0
    first_scheduled: float = -1.0
    first_token: float = -1.0
    last_token: float = -1.0
    finish: float = -1.0
    reject_reason: str = ""
    output_token_ids: list[int] = field(default_factory=list)  # filled by a real backend
    # Prefix caching (core/prefix_cache.py): chained keys of its full prompt blocks (None
    # until looked up, or with caching off), and the prompt tokens its first admission
    # found cached (vLLM's num_cached_tokens).
    block_keys: tuple[int, ...] | None = None
    cached_tokens: int = 0

    @property
    def id(self) -> int:
        return self.request.id

    @property
    def known(self) -> int:
        return self.request.prompt_len + self.num_generated

    @property
    def remaining_prefill(self) -> int:
        """Tokens to process before the next token can be sampled (1 when decoding)."""
        return self.known - self.num_computed

    @property
    def is_prefilling(self) -> bool:
        return self.remaining_prefill > 1 or self.num_computed == 0

    @property
    def done(self) -> bool:
        return self.num_generated >= self.request.output_len
