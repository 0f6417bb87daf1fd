"""A workload: the requests to serve, held as columns (numpy) so a million of them cost
a few tens of MB; Request objects are made one at a time as they arrive."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from core.request import Request


@dataclass
class Workload:
    arrival: np.ndarray  # float64 seconds, non-decreasing, first >= 0
    prompt_len: np.ndarray  # int64 >= 1
    output_len: np.ndarray  # int64 >= 1
    priority: np.ndarray | None = None  # int64, lower = more important
    prefix_hashes: list[tuple[int, ...]] | None = None
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

    def __len__(self) -> int:
        return len(self.arrival)

    def request(self, i: int, arrival: float | None = None) -> Request:
        return Request(
            id=i,
            arrival=float(self.arrival[i]) if arrival is None else arrival,
            prompt_len=int(self.prompt_len[i]),
            output_len=int(self.output_len[i]),
            priority=int(self.priority[i]) if self.priority is not None else 0,
            prefix_hashes=self.prefix_hashes[i] if self.prefix_hashes is not None else None,
        )

    def requests(self) -> Iterator[Request]:
        for i in range(len(self)):
            yield self.request(i)

    def describe(self) -> str:
        return "; ".join(self.description)
