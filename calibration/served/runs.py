"""Step tables of served runs, read back from what `batchlab run --out` and `batchlab
validate --out` wrote, for fitting a cost model to serving (calibrate --from-run).

Layouts recognised:
- `batchlab run --out DIR`: DIR/meta.json keyed by policy, DIR/POLICY/steps.csv;
- `batchlab validate --out DIR`: DIR/POLICY/real/{meta.json, steps.csv}, and with
  --repeats N also DIR/POLICY/real_2 ... real_N;
- one run folder: DIR/{meta.json (that run's), steps.csv}.
Only real runs count (meta world "real"); a simulated one is not a measurement. The
folders are found and read by core/run_folder.py, which wrote them. Every problem is a
ValueError of one line naming the directory and what is missing."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batchlab.core.run_folder import RunFolder, find_runs
from batchlab.core.run_meta import RunMeta

# What every run must agree on (and agree with a profile on): the same model on the same
# device at the same thread count and dtype prices its steps the same way.
IDENTITY = ("model", "device", "threads", "dtype")


@dataclass
class ServedRun:
    where: str  # the directory, and the policy where one directory holds several
    meta: RunMeta
    steps: dict[str, np.ndarray]
    source: RunFolder | None = None  # the run folder it was read from

    @property
    def identity(self) -> dict:
        return {k: getattr(self.meta, k) for k in IDENTITY}

    def __len__(self) -> int:
        return int(self.steps["duration_s"].size)


def _one(run: RunFolder) -> ServedRun:
    meta, where = run.meta, run.where
    if meta.world != "real":
        what = "a simulated run" if meta.world == "sim" else "not a batchlab run's meta.json"
        raise ValueError(f"{where}: {what} (meta.json world={meta.world!r}); expected a "
                         f"served run (batchlab run or validate --out)")
    missing = [k for k in IDENTITY if getattr(meta, k) is None]
    if missing:
        raise ValueError(f"{where}: meta.json records no {missing[0]}; expected a served run's meta")
    if not run.has_steps():
        raise ValueError(f"{where}: no steps.csv (the run was written without its step table)")
    return ServedRun(where, meta, run.steps(), run)


def read_runs(directory: str | Path) -> list[ServedRun]:
    """Every served run under `directory` (see the module docstring)."""
    return [_one(r) for r in find_runs(directory)]


def check_same(runs: list[ServedRun]) -> None:
    """All runs of one model, device, thread count and dtype: a ValueError naming the
    first that differs."""
    first = runs[0]
    for r in runs[1:]:
        for k in IDENTITY:
            mine, theirs = getattr(r.meta, k), getattr(first.meta, k)
            if mine != theirs:
                raise ValueError(f"{r.where}: {k} {mine!r}, but {first.where} has "
                                 f"{theirs!r}: runs to fit together must share model, "
                                 f"device, threads and dtype")
