"""What every run's meta.json says about the conditions it ran in: its stable/overloaded
verdict (core/stability.py, for simulated and real runs) and, for a real run, how fast
the machine ran during it (experiments/machine_speed.py: its steady decode steps priced
by a profile). Shared by `batchlab run`, `serve` and `validate`."""
from __future__ import annotations

from batchlab.core.cost.form import CostModel
from batchlab.core.result import RunResult
from batchlab.core.run_meta import MachineSpeed, Stability
from batchlab.core.stability import queue_stability
from batchlab.experiments.machine_speed import machine_speed


def stability(result: RunResult) -> Stability:
    """The run's verdict, computed once and kept in its meta."""
    if result.meta.stability is None:
        st = queue_stability(result.requests)
        result.meta.stability = Stability(verdict=st.verdict,
                                          queue_by_quarter=[round(q, 3) for q in st.queue_by_quarter])
    return result.meta.stability


def label_real(result: RunResult, cost: CostModel | None, source: str = "",
               probe: dict | None = None) -> RunResult:
    """Record the machine's speed during a real run (priced by `cost`, if any; with no
    cost, the reference `probe` timed before and after it) and its stability in its meta."""
    speed = machine_speed(result.steps, cost, source)
    if cost is None and probe is not None:
        speed = MachineSpeed(**{**speed.as_dict(), "method": "reference probe (read bandwidth, matmul "
                                "rate) before and after the run: no profile prices this model, "
                                "device and thread count",
                                "probe": probe, "why": "no profile of this setup to price its steady "
                                "decode steps (batchlab run --profile P measures the factor)"})
    result.meta.machine_speed = speed
    stability(result)
    return result


def is_overloaded(result: RunResult) -> bool:
    return stability(result).verdict == "overloaded"
