"""Requests (immutable) and the per-replica state of a sequence being served."""
from __future__ import annotations

from enum import Enum
from typing import Any, Final


REQUEST_FIELDS = ("id", "arrival", "prompt_len", "output_len", "prompt_token_ids", "priority",
                  "prefix_hashes", "hash_block_size")


class Request:
    """One user request. Generation stops after exactly `output_len` tokens (EOS is
    ignored, as `vllm bench serve --ignore-eos` does), so sim and real do identical work.

    Immutable: its fields are Final (the compiled build's type check refuses a write), and
    a changed copy comes from replace(). A plain class, not a frozen dataclass: compiled,
    a dataclass keeps its generated __init__ interpreted, one call a request."""

    __slots__ = REQUEST_FIELDS

    def __init__(self, id: int, arrival: float, prompt_len: int, output_len: int,
                 prompt_token_ids: tuple[int, ...] | None = None, priority: int = 0,
                 prefix_hashes: tuple[int, ...] | None = None, hash_block_size: int = 512) -> None:
        if prompt_len < 1:
            raise ValueError(f"request {id}: prompt_len must be >= 1, got {prompt_len}")
        if output_len < 1:
            raise ValueError(f"request {id}: output_len must be >= 1, got {output_len}")
        if hash_block_size < 1:
            raise ValueError(f"request {id}: hash_block_size must be >= 1, got {hash_block_size}")
        if not arrival >= 0:
            raise ValueError(f"request {id}: arrival must be >= 0, got {arrival}")
        if prompt_token_ids is not None and len(prompt_token_ids) != prompt_len:
            raise ValueError(
                f"request {id}: {len(prompt_token_ids)} prompt token ids but prompt_len={prompt_len}")
        self.id: Final = id
        self.arrival: Final = arrival  # seconds since the start of the workload
        self.prompt_len: Final = prompt_len
        self.output_len: Final = output_len
        self.prompt_token_ids: Final = prompt_token_ids
        self.priority: Final = priority  # lower value = more important (vLLM convention)
        self.prefix_hashes: Final = prefix_hashes  # hashes of leading prompt blocks
        self.hash_block_size: Final = hash_block_size  # tokens each prefix hash covers (Mooncake's 512)

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in REQUEST_FIELDS)

    def replace(self, **changes: Any) -> "Request":
        """A copy with `changes` (field=value), validated as a new request is."""
        unknown = set(changes) - set(REQUEST_FIELDS)
        if unknown:
            raise TypeError(f"Request has no field {sorted(unknown)[0]!r}")
        values = dict(zip(REQUEST_FIELDS, self._values()))
        values.update(changes)
        return Request(**values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Request) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in zip(REQUEST_FIELDS, self._values()))
        return f"Request({inner})"

    @property
    def max_kv_tokens(self) -> int:
        """KV slots the request needs at its longest: the last output token is never fed
        back, so prompt + output - 1."""
        return self.prompt_len + self.output_len - 1


def requests_from_columns(first_id: int, arrival: list[float], prompt_len: list[int],
                          output_len: list[int], priority: list[int],
                          prefix_hashes: list[tuple[int, ...] | None],
                          hash_block_size: int) -> list[Request]:
    """Requests first_id, first_id + 1, ... from columns of plain Python numbers (the
    workload's, core/workload/workload.py): a compiled loop, where an interpreted one
    spent more than the rest of a request's arrival."""
    out: list[Request] = []
    for j in range(len(arrival)):  # a for statement: a comprehension's range is a Python call
        out.append(Request(first_id + j, arrival[j], prompt_len[j], output_len[j], None, priority[j],
                           prefix_hashes[j], hash_block_size))
    return out


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    REJECTED = "rejected"
    ABORTED = "aborted"  # its client left before it finished (batchlab serve)
    FAILED = "failed"  # an error ended it alone; reject_reason says which (serve, replay)


class Sequence:
    """A request's state on one replica.

    Token bookkeeping, uniform for prefill, chunked prefill, decode and recompute:
    the sequence knows `known = prompt_len + num_generated` tokens; `num_computed` of
    them have their KV in cache. A step processes tokens [num_computed, num_computed+n);
    when that reaches `known`, the step samples one new token.

    A plain class with its own __init__ (compiled, a dataclass's would stay interpreted).
    """

    __slots__ = ("request", "status", "num_computed", "num_generated", "block_table",
                 "admit_order", "decoding", "group_tick", "preemptions", "first_scheduled",
                 "first_token", "last_token", "finish", "reject_reason", "output_token_ids",
                 "block_keys", "cached_tokens", "kv_elsewhere")

    def __init__(self, request: Request) -> None:
        self.request = request
        self.status = Status.WAITING
        self.num_computed = 0
        self.num_generated = 0
        self.block_table: list[int] = []
        self.admit_order = -1  # set at each admission; larger = admitted more recently
        self.decoding = False  # sampled since its last admission: each step now decodes (core/emission.py)
        self.group_tick = -1  # >= 0: counters kept lazily by a DecodeGroup since that tick
        self.preemptions = 0
        self.first_scheduled = -1.0
        self.first_token = -1.0
        self.last_token = -1.0
        self.finish = -1.0
        self.reject_reason = ""
        self.output_token_ids: list[int] = []  # filled by a real backend
        # Prefix caching (core/prefix_cache.py): chained keys of its full prompt blocks (None
        # until looked up, or with caching off), and the prompt tokens its first admission
        # found cached (vLLM's num_cached_tokens).
        self.block_keys: tuple[int, ...] | None = None
        self.cached_tokens = 0
        # Tokens of its computed KV held off this replica while it waits (core/kv_home.py):
        # admission loads them instead of computing them.
        self.kv_elsewhere = 0

    def __repr__(self) -> str:
        return (f"Sequence(request={self.request.id}, status={self.status.name}, "
                f"computed={self.num_computed}, generated={self.num_generated})")

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
