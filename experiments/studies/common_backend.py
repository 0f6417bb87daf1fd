"""What the --backend variants of claims 2-4 share: one loaded model per process (a
study, or a test session, loads batchlab-tiny once), and a real run watched step by step
as sim.simulate's observer watches a simulated one. Imported only with --backend: it
needs torch and transformers."""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import TypeVar

import numpy as np

from batchlab.backend.driver import run_workload
from batchlab.backend.runtime import Runtime
from batchlab.core.batch import StepObserver
from batchlab.core.config import SchedulerConfig
from batchlab.core.result import RunResult
from batchlab.core.workload import Workload
from batchlab.experiments.studies.common import BUSY

MODEL = "batchlab-tiny"
THREADS = 1  # one torch thread gives steady timing on a small shared CPU
Attempt = TypeVar("Attempt")


@lru_cache(maxsize=2)
def runtime(model: str = MODEL) -> Runtime:
    """A loaded model, reused by every run in this process (each run gets a fresh engine
    and scheduler; only the weights and the KV pool's memory are shared)."""
    return Runtime(model=model, threads=THREADS)


def serve(workload: Workload, cfg: SchedulerConfig, observer: StepObserver | None = None,
          model: str = MODEL, rt: Runtime | None = None) -> RunResult:
    """Serve `workload` on the real backend on the wall clock (arrivals as given),
    calling observer(replica, start, duration, batch) after each step as
    sim.simulate does. On `rt` when given (a caller's own loaded model), else on `model`."""
    return run_workload(rt or runtime(model), workload, cfg, progress=False, observer=observer)


def decode_step_ms(steps: dict[str, np.ndarray]) -> float:
    """Median duration of decode-only steps (the price of the batch alone), ms."""
    decode = steps["prefill_tokens"] == 0
    return float(np.median(steps["duration_s"][decode]) * 1000) if decode.any() else math.nan


def machine(rt: Runtime | None = None) -> str:
    """'batchlab-tiny (21M parameters), float32, 1 torch thread on <CPU>'."""
    m = (rt or runtime()).meta()
    return (f"{m.model} ({m.model_params / 1e6:.0f}M parameters, seeded random weights), "
            f"{m.dtype}, {m.threads} torch thread on {m.cpu}")


def speed_reference(seats: int, prompt: int = 100, steps_each: int = 6, rounds: int = 2,
                    rt: Runtime | None = None) -> dict[int, float]:
    """Decode-step seconds with 1..seats sequences on this machine now: one run of `seats`
    requests at t=0 whose replies end `steps_each` steps apart, so the batch shrinks from
    `seats` to 1. The fastest of `rounds` runs per batch size (the least disturbed)."""
    n = seats
    w = Workload(np.zeros(n), np.full(n, prompt), 2 + steps_each * np.arange(1, n + 1),
                 description=[f"speed reference: {n} requests, prompt {prompt}"])
    longest = prompt + 2 + steps_each * n
    cfg = SchedulerConfig(policy="continuous", max_num_seqs=n, block_size=16,
                          num_kv_blocks=n * -(-longest // 16))
    best: dict[int, float] = {}
    for _ in range(rounds):
        st = serve(w, cfg, rt=rt).steps
        for k in range(1, n + 1):
            d = st["duration_s"][(st["prefill_tokens"] == 0) & (st["num_seqs"] == k)]
            if d.size:
                best[k] = min(best.get(k, math.inf), float(np.median(d)))
    return best


def slowdown(steps: dict[str, np.ndarray], reference: dict[int, float]) -> float:
    """A run's decode-only steps' time over what the reference steps of the same sizes
    took: ~1 on an otherwise idle machine (a little above: longer contexts), well above
    when other work shared the CPU during the run. A ratio of sums, not a median of ratios,
    so that a stall of a few steps (another process starting) counts as well as a steady
    share of the CPU taken."""
    k, d = steps["num_seqs"], steps["duration_s"]
    decode = (steps["prefill_tokens"] == 0) & np.isin(k, list(reference))
    if not decode.any():
        return math.nan
    ref = np.array([reference[int(x)] for x in k[decode]])
    return float(d[decode].sum() / ref.sum())


def unless_busy(attempt: Callable[[], Attempt], slow: Callable[[Attempt], float],
                on_busy: Callable[[float], None]) -> tuple[Attempt, int]:
    """attempt(), and once more when its slowdown (slow) passed BUSY, after on_busy(it):
    the last one counts. Returns it and the number of reruns (0 or 1)."""
    first = attempt()
    if not slow(first) > BUSY:
        return first, 0
    on_busy(slow(first))
    return attempt(), 1
