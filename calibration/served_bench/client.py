"""The requests a benchmark row stands for, as a closed-loop workload, under a stated
model of its client.

A row says `concurrency` users, each sending its next request when its last reply ends,
every request `isl` tokens in and `osl` out; it does not say how the users' sends were
phased. Two models bound it:
  lockstep   every user sends at t=0, as `vllm bench serve --max-concurrency N
             --request-rate inf` starts; identical lengths then keep them in step
  staggered  the users' first sends spread evenly over one request's latency: the steady
             state of a closed loop whose users drifted out of phase
The measured TTFT lies between the two on the shared rows (docs/results/
2026-12-06-served-engine-baseline.md)."""
from __future__ import annotations

import numpy as np

from batchlab.calibration.served_bench.read import BenchmarkRow
from batchlab.core.workload.workload import Workload

CLIENTS = ("lockstep", "staggered")
ROUNDS = 8  # requests each user sends: the mean is the steady state's, not the first round's


def benchmark_workload(row: BenchmarkRow, client: str, latency_s: float | None = None,
                       rounds: int = ROUNDS) -> Workload:
    """latency_s: one request's latency, over which `staggered` spreads the first sends
    (the lockstep run's mean end-to-end latency)."""
    if client not in CLIENTS:
        raise ValueError(f"client model {client!r}: expected one of {', '.join(CLIENTS)}")
    users = row.concurrency
    n = users * rounds
    arrival = np.zeros(n)
    if client == "staggered":
        if latency_s is None:
            raise ValueError("the staggered client needs one request's latency to spread the first sends over")
        arrival[:users] = np.arange(users) * (latency_s / users)
        arrival[users:] = arrival[users - 1]  # later sends wait for a reply (the closed loop)
    return Workload(arrival=arrival, prompt_len=np.full(n, row.isl), output_len=np.full(n, row.osl),
                    description=[f"{row.describe()} ({row.place}): {rounds} requests a user, {client} client"],
                    max_concurrency=users)
