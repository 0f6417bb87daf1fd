"""Step tables of served runs, read back from what `batchlab run --out` and `batchlab
validate --out` wrote, for fitting a cost model to serving (calibrate --from-run).

Layouts recognised:
- `batchlab run --out DIR`: DIR/meta.json keyed by policy, DIR/POLICY/steps.csv;
- `batchlab validate --out DIR`: DIR/POLICY/real/{meta.json, steps.csv}, and with
  --repeats N also DIR/POLICY/real_2 ... real_N;
- one run folder: DIR/{meta.json (that run's), steps.csv}.
Only real runs count (meta "world": "real"); a simulated one is not a measurement.
Every problem is a ValueError of one line naming the directory and what is missing."""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batchlab.core.features import FEATURE_NAMES, IDLE_GAP_S, LATER_FEATURES, masked_pairs_estimate
from batchlab.core.profile import DeviceInfo

# What every run must agree on (and agree with a profile on): the same model on the same
# device at the same thread count and dtype prices its steps the same way.
IDENTITY = ("model", "device", "threads", "dtype")
REQUIRED = ("start_s", "duration_s") + tuple(n for n in FEATURE_NAMES if n not in LATER_FEATURES)


@dataclass
class ServedRun:
    where: str  # the directory, and the policy where one directory holds several
    meta: dict
    steps: dict[str, np.ndarray]

    @property
    def identity(self) -> dict:
        return {k: self.meta.get(k) for k in IDENTITY}

    def __len__(self) -> int:
        return int(self.steps["duration_s"].size)


def device_info(meta: dict) -> DeviceInfo:
    """The device a run (or a calibration) measured, from the backend's meta."""
    kind = meta["device"].split(":")[0]
    name = meta.get("gpu") if kind == "cuda" else meta.get("cpu", "")
    return DeviceInfo(kind=kind, name=name or kind, threads=meta.get("threads"),
                      dtype=meta["dtype"], matmul=meta.get("matmul", ""), torch=meta.get("torch", ""))


def read_steps(path: Path, where: str) -> dict[str, np.ndarray]:
    """A steps.csv as float columns. Tables written before the context features existed
    get them derived from the table itself: after_prefill from the previous row, after_idle
    from the gap before the step (>= IDLE_GAP_S; the first step counts), masked_pairs
    from the prefill tokens (core.features.masked_pairs_estimate)."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        raise ValueError(f"{where}: cannot read {path.name}: {e.strerror}") from None
    if not rows:
        raise ValueError(f"{where}: {path.name} is empty; expected a batchlab step table")
    header = rows[0]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise ValueError(f"{where}: {path.name} is not a batchlab step table (no column {missing[0]})")
    cols = {}
    for j, name in enumerate(header):
        try:
            cols[name] = np.array([float(r[j]) for r in rows[1:]], dtype=float)
        except (ValueError, IndexError):
            bad = next(i for i, r in enumerate(rows[1:], 2) if len(r) <= j or not _is_float(r[j]))
            raise ValueError(f"{where}: {path.name} row {bad}: column {name} is not a number") from None
    if "replica" in cols and cols["replica"].size and np.any(cols["replica"] != cols["replica"][0]):
        raise ValueError(f"{where}: {path.name} has steps of several replicas; expected one engine")
    if "after_prefill" not in cols:
        prefill = cols["num_prefill_seqs"] > 0
        cols["after_prefill"] = np.concatenate(([0.0], prefill[:-1].astype(float)))[:prefill.size]
    if "masked_pairs" not in cols:  # a table written before the feature
        cols["masked_pairs"] = np.array([float(masked_pairs_estimate(int(c), int(n))) for c, n in
                                         zip(cols["prefill_tokens"], cols["num_prefill_seqs"])])
    if "after_idle" not in cols:
        start, dur = cols["start_s"], cols["duration_s"]
        gap = np.concatenate(([math.inf], start[1:] - (start[:-1] + dur[:-1])))[:start.size]
        cols["after_idle"] = (gap >= IDLE_GAP_S).astype(float)
    return cols


def _is_float(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def read_object(path: Path, where: str) -> dict:
    """A JSON file holding one object (a run's meta.json, summary.json, config.json): a
    ValueError of one line naming `where` and the file where it cannot be read or is not."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: cannot read {path.name} ({getattr(e, 'strerror', None) or e})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: {path.name} is not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: {path.name} is not a batchlab run's (expected an object)")
    return data


def _one(d: Path, meta: dict, where: str) -> ServedRun:
    if meta.get("world") != "real":
        what = "a simulated run" if meta.get("world") == "sim" else "not a batchlab run's meta.json"
        raise ValueError(f"{where}: {what} (meta.json world={meta.get('world')!r}); expected a "
                         f"served run (batchlab run or validate --out)")
    missing = [k for k in IDENTITY if meta.get(k) is None]
    if missing:
        raise ValueError(f"{where}: meta.json records no {missing[0]}; expected a served run's meta")
    steps = d / "steps.csv"
    if not steps.is_file():
        raise ValueError(f"{where}: no steps.csv (the run was written without its step table)")
    return ServedRun(where, meta, read_steps(steps, where))


def _is_real_dir(name: str) -> bool:
    return name == "real" or (name.startswith("real_") and name[5:].isdigit())


def read_runs(directory: str | Path) -> list[ServedRun]:
    """Every served run under `directory` (see the module docstring)."""
    d = Path(directory)
    if not d.is_dir():
        raise ValueError(f"{d}: not a directory; expected a batchlab run's --out directory")
    meta_path = d / "meta.json"
    if meta_path.is_file():
        meta = read_object(meta_path, str(d))
        if "world" in meta:  # one run's own meta (validate's POLICY/real)
            return [_one(d, meta, str(d))]
        runs = [_one(d / p, m, f"{d} ({p})") for p, m in meta.items()
                if isinstance(m, dict) and (d / p).is_dir()]
        if not runs:
            raise ValueError(f"{d}: meta.json names no policy folder; expected a batchlab run's --out")
        return runs
    real = sorted((p for p in d.glob("*/real*") if _is_real_dir(p.name) and (p / "meta.json").is_file()),
                  key=lambda p: (p.parent.name, int(p.name.partition("_")[2] or 1)))
    if real:  # validate --out: POLICY/real, and POLICY/real_2 ... with --repeats
        return [_one(p, read_object(p / "meta.json", str(p)), str(p)) for p in real]
    raise ValueError(f"{d}: not a batchlab run (no meta.json, nor POLICY/real/meta.json of validate)")


def check_same(runs: list[ServedRun]) -> None:
    """All runs of one model, device, thread count and dtype: a ValueError naming the
    first that differs."""
    first = runs[0]
    for r in runs[1:]:
        for k in IDENTITY:
            if r.meta.get(k) != first.meta.get(k):
                raise ValueError(f"{r.where}: {k} {r.meta.get(k)!r}, but {first.where} has "
                                 f"{first.meta.get(k)!r}: runs to fit together must share model, "
                                 f"device, threads and dtype")
