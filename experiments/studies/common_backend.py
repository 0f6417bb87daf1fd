"""What the --backend variants of claims 2-4 share: one loaded model per process (a
study, or a test session, loads batchlab-tiny once), and a real run that can be
watched step by step like sim.simulate's observer. Imported only with --backend: it
needs torch and transformers."""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from backend.driver import run_workload
from backend.runtime import Runtime
from core.batch import Batch
from core.config import SchedulerConfig
from core.result import RunResult
from core.workload import Workload

MODEL = "batchlab-tiny"
THREADS = 1  # as batching_backend: one torch thread gives steady timing on a small shared CPU

Observer = Callable[[int, float, float, Batch], None]


@lru_cache(maxsize=2)
def runtime(model: str = MODEL) -> Runtime:
    """A loaded model, reused by every run in this process (each run gets a fresh engine
    and scheduler; only the weights and the KV pool's memory are shared)."""
    return Runtime(model=model, threads=THREADS)


class _TapEngine:
    """An engine that remembers the batch it executed last (everything else delegated)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.batch: Batch | None = None

    def execute(self, batch: Batch) -> float:
        self.batch = batch
        return self._engine.execute(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


class _TapRuntime:
    """A Runtime whose engine is tapped. run_workload has no observer argument; its
    on_step hook runs after Scheduler.complete and outside the timed region, which is
    exactly when sim.simulate calls its observer, so the tap adds no step time."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self.engine_tap: _TapEngine | None = None

    def engine(self, *args: Any, **kw: Any) -> _TapEngine:
        self.engine_tap = _TapEngine(self._rt.engine(*args, **kw))
        return self.engine_tap

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rt, name)


def serve(workload: Workload, cfg: SchedulerConfig, observer: Observer | None = None,
          model: str = MODEL) -> RunResult:
    """Serve `workload` on the real backend on the wall clock (arrivals as given),
    calling observer(replica, start, duration, batch) after each step as
    sim.simulate does (start and duration are NaN here: read them from the step table)."""
    rt = runtime(model)
    if observer is None:
        return run_workload(rt, workload, cfg, progress=False)
    tap = _TapRuntime(rt)

    def on_step(_: int) -> None:
        observer(0, math.nan, math.nan, tap.engine_tap.batch)
    return run_workload(tap, workload, cfg, progress=False, on_step=on_step)  # type: ignore[arg-type]


def decode_step_ms(steps: dict[str, np.ndarray]) -> float:
    """Median duration of decode-only steps (the price of the batch alone), ms."""
    decode = steps["prefill_tokens"] == 0
    return float(np.median(steps["duration_s"][decode]) * 1000) if decode.any() else math.nan


def machine(rt: Runtime | None = None) -> str:
    """'batchlab-tiny (21M parameters), float32, 1 torch thread on <CPU>'."""
    m = (rt or runtime()).meta()
    return (f"{m['model']} ({m['model_params'] / 1e6:.0f}M parameters, seeded random weights), "
            f"{m['dtype']}, {m['threads']} torch thread on {m['cpu']}")


def speed_reference(seats: int, prompt: int = 100, steps_each: int = 6, rounds: int = 2) -> dict[int, float]:
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
        st = serve(w, cfg).steps
        for k in range(1, n + 1):
            d = st["duration_s"][(st["prefill_tokens"] == 0) & (st["num_seqs"] == k)]
            if d.size:
                best[k] = min(best.get(k, math.inf), float(np.median(d)))
    return best


def slowdown(steps: dict[str, np.ndarray], reference: dict[int, float]) -> float:
    """Median over a run's decode-only steps of (duration / reference step of that many
    sequences): ~1 on an otherwise idle machine (a little above: longer contexts), well
    above when other work shared the CPU during the run."""
    k, d = steps["num_seqs"], steps["duration_s"]
    decode = (steps["prefill_tokens"] == 0) & np.isin(k, list(reference))
    if not decode.any():
        return math.nan
    ref = np.array([reference[int(x)] for x in k[decode]])
    return float(np.median(d[decode] / ref))
