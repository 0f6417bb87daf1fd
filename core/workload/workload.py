"""A workload: the requests to serve, held as columns (numpy) so a million of them cost
a few tens of MB; Request objects are made one at a time as they arrive."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from batchlab.core.request import Request, requests_from_columns


@dataclass
class Workload:
    arrival: np.ndarray  # float64 seconds, non-decreasing, first >= 0
    prompt_len: np.ndarray  # int64 >= 1
    output_len: np.ndarray  # int64 >= 1
    priority: np.ndarray | None = None  # int64, lower = more important
    # Hashes of the prompt's blocks of hash_block_size tokens (Mooncake: 512), chained:
    # two requests share as many leading blocks of prompt as their lists share leading
    # hashes. core/prefix_cache.py maps them onto the engine's KV blocks.
    prefix_hashes: list[tuple[int, ...]] | None = None
    hash_block_size: int = 512
    description: list[str] = field(default_factory=list)  # how it was made, step by step
    # Closed loop (vllm bench serve --max-concurrency): at most this many in flight; a
    # request is sent at max(its arrival, a previous reply + think time).
    max_concurrency: int | None = None
    think_time_s: float = 0.0

    def __post_init__(self) -> None:
        self.arrival = np.asarray(self.arrival, dtype=np.float64)
        self.prompt_len = np.asarray(self.prompt_len, dtype=np.int64)
        self.output_len = np.asarray(self.output_len, dtype=np.int64)
        n = len(self.arrival)
        if len(self.prompt_len) != n or len(self.output_len) != n:
            raise ValueError("workload columns differ in length")
        if self.priority is not None:
            self.priority = np.asarray(self.priority, dtype=np.int64)
            if len(self.priority) != n:
                raise ValueError("workload columns differ in length")
        if self.prefix_hashes is not None and len(self.prefix_hashes) != n:
            raise ValueError("workload prefix_hashes differ in length from its columns")
        if n and (self.arrival[0] < 0 or (self.arrival[1:] < self.arrival[:-1]).any()):
            raise ValueError("workload arrivals must be >= 0 and non-decreasing")
        if n and (self.prompt_len.min() < 1 or self.output_len.min() < 1):
            raise ValueError("workload prompt and output lengths must be >= 1")

    def __len__(self) -> int:
        return len(self.arrival)

    def request(self, i: int, arrival: float | None = None) -> Request:
        """Request i; `arrival` instead of its own (a closed loop's send time)."""
        request = self.request_block(i, i + 1)[0]
        return request if arrival is None else request.replace(arrival=arrival)

    def request_block(self, lo: int, hi: int) -> list[Request]:
        """Requests lo..hi-1, their columns read in one go (plain Python numbers)."""
        arrival, prompt, output = (c[lo:hi].tolist() for c in (self.arrival, self.prompt_len, self.output_len))
        priority = self.priority[lo:hi].tolist() if self.priority is not None else [0] * (hi - lo)
        hashes = self.prefix_hashes[lo:hi] if self.prefix_hashes is not None else [None] * (hi - lo)
        return requests_from_columns(lo, arrival, prompt, output, priority, list(hashes), self.hash_block_size)

    def requests(self) -> Iterator[Request]:
        for i in range(len(self)):
            yield self.request(i)

    def describe(self) -> str:
        return "; ".join(self.description)

    def replace(self, step: str | None = None, **columns: object) -> "Workload":
        """A copy with some fields replaced and, if given, one more description step."""
        description = [*self.description, *([step] if step else [])]
        return dataclasses.replace(self, description=description, **columns)

    def take(self, index: np.ndarray | slice, step: str | None = None,
             arrival: np.ndarray | None = None) -> "Workload":
        """The rows at `index` (a slice, a boolean mask or positions), with their arrival
        times, or `arrival` instead (one per row taken, non-decreasing)."""
        hashes = self.prefix_hashes
        if hashes is not None:
            pos = np.arange(len(self))[index]
            hashes = [hashes[i] for i in pos]
        return self.replace(
            step, arrival=self.arrival[index] if arrival is None else arrival,
            prompt_len=self.prompt_len[index],
            output_len=self.output_len[index], prefix_hashes=hashes,
            priority=self.priority[index] if self.priority is not None else None)
