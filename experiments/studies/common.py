"""What every study shares: the preset cost model (the same roofline and KV capacity
`batchlab simulate` uses), progress on stderr, and CSV tables written row by row so an
interrupted sweep keeps the points that finished."""
from __future__ import annotations

import csv
import math
import sys
import time
from pathlib import Path
from typing import Any, Iterable

from batchlab.core import atomic
from batchlab.core.cost.form import CostModel
from batchlab.core.model.presets import lookup_model
from batchlab.core.model.spec import ModelSpec
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.setup import roofline_setup
from batchlab.experiments.setup.meta import SetupMeta

# A real backend run whose decode steps took this much longer than the reference steps
# timed before it shared the CPU with other work (2 vCPUs, other jobs): it is run once more
# (common_backend.unless_busy; here, where reports read it without torch).
BUSY = 1.3


class Progress:
    """One line per finished unit of work on stderr: `[name  12.3 s] message`."""

    def __init__(self, name: str, quiet: bool = False) -> None:
        self.name, self.quiet = name, quiet
        self.t0 = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def __call__(self, message: str) -> None:
        if not self.quiet:
            print(f"[{self.name} {self.elapsed:6.1f} s] {message}", file=sys.stderr, flush=True)


class RowLog:
    """A CSV table written again, atomically (core/atomic.py), after each row: an
    interrupt keeps every row that finished and never a row cut in half."""

    def __init__(self, path: Path, columns: Iterable[str]) -> None:
        self.path = path
        self.columns = list(columns)
        self.rows: list[dict[str, Any]] = []
        self._write()

    def add(self, row: dict[str, Any]) -> dict[str, Any]:
        self.rows.append(row)
        self._write()
        return row

    def _write(self) -> None:
        with atomic.atomic_open(self.path, "w", newline="") as f:
            w = csv.DictWriter(f, self.columns, extrasaction="ignore")
            w.writeheader()
            w.writerows({k: _cell(r.get(k)) for k in self.columns} for r in self.rows)

    def close(self) -> None:
        pass  # every row is on disk already

    def __enter__(self) -> "RowLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cell(v: Any) -> Any:
    if isinstance(v, float):
        return "" if not math.isfinite(v) else f"{v:.6g}"
    return "" if v is None else v


def preset(model: str, hardware: str, tensor_parallel: int = 1, block_size: int = 16,
           num_kv_blocks: int | None = None) -> tuple[CostModel, int, SetupMeta, ModelSpec]:
    """Roofline cost model and KV blocks for a preset pairing, with the efficiencies and
    overhead defaults of every other command (ExperimentConfig's [hardware] defaults)."""
    cfg = ExperimentConfig.model_validate({
        "model": {"name": model},
        "hardware": {"name": hardware, "tensor_parallel": tensor_parallel},
        "scheduler": {"block_size": block_size, "num_kv_blocks": num_kv_blocks},
    })
    cost, blocks, meta = roofline_setup(cfg)
    h = cfg.hardware
    meta = meta.model_copy(update={"gpu_memory_utilization": h.gpu_memory_utilization,
                                   "block_size": block_size, "num_kv_blocks": blocks})
    return cost, blocks, meta, lookup_model(model)


def setup_line(meta: SetupMeta) -> str:
    """The hardware sentence every report opens with."""
    m = meta
    gpus = f"{m.tensor_parallel} x {m.hardware}" if m.tensor_parallel > 1 else m.hardware
    return (f"{m.model} on {gpus}, roofline cost model at {m.mem_efficiency:.0%} of "
            f"datasheet bandwidth and {m.compute_efficiency:.0%} of peak FLOP/s, "
            f"{m.step_overhead_s * 1000:g} ms per-step overhead; KV cache "
            f"{m.num_kv_blocks} blocks of {m.block_size} tokens "
            f"({m.num_kv_blocks * m.block_size:,} tokens)")


def pick(params: dict[str, dict], size: str) -> dict:
    if size not in params:
        raise ValueError(f"unknown size {size!r}; expected one of {', '.join(params)}")
    return params[size]


def command_line(name: str, size: str, backend: bool = False) -> str:
    flags = (" --small" if size == "small" else "") + (" --backend" if backend else "")
    return f"batchlab experiment {name}{flags}"
