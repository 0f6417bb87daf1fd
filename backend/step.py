"""One timed engine step, shared by the wall-clock driver (`batchlab run`) and the HTTP
server's engine loop, so that both record the same step table: features with their step
context (core/features.py), the KV blocks in use and cached before the step, the forward
pass timed alone, then the scheduler's bookkeeping."""
from __future__ import annotations

from typing import Callable

from batchlab.backend.engine import Engine
from batchlab.backend.kv_tiers import HostSwap
from batchlab.core.batch import Batch, step_features
from batchlab.core.features import StepHistory
from batchlab.core.metrics import MetricsRecorder
from batchlab.core.request import Sequence
from batchlab.core.schedulers.base import Scheduler


def run_step(sched: Scheduler, engine: Engine, batch: Batch, history: StepHistory,
             rec: MetricsRecorder, clock: Callable[[], float]) -> tuple[float, float, list[Sequence]]:
    """Execute `batch` and record it; returns (start, end, finished sequences)."""
    kv = sched.kv
    features = step_features(batch, *history.context(clock()), window=engine.runner.window)
    kv_used, cached = kv.num_used, kv.num_cached
    start = clock()
    home = sched.kv_home
    if isinstance(home, HostSwap):  # the tier's copies block the step (backend/kv_tiers/)
        home.note(start)
        home.apply()
    engine.execute(batch)
    end = clock()
    history.ran(end, features.num_prefill_seqs > 0)
    finished = sched.complete(batch, end)
    rec.record_step(0, start, end, batch, features, kv_used, kv.num_blocks, sched.max_seqs, cached)
    return start, end, finished
