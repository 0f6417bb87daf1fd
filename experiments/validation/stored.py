"""Real runs read back from what `batchlab validate --out` (and the fidelity study's
cells/WORKLOAD folders, which it writes the same way) stored: DIR/config.json with the
workload, DIR/POLICY/real, real_2, ... each with meta.json (the scheduler settings among
them), summary.json and steps.csv. What `validate --real` needs to simulate the identical
request list again with another profile. Every problem is a UserError of one line naming
the file and what is missing."""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from core.config import SchedulerConfig
from core.workload import Workload, WorkloadConfig, build_workload
from experiments.errors import UserError


@dataclass
class StoredRun:
    where: Path
    meta: dict
    summary: dict
    steps: dict[str, np.ndarray]


@dataclass
class StoredCell:
    """One policy's real runs of one validation, and what they served."""
    where: Path  # DIR/POLICY
    workload: Workload
    scheduler: SchedulerConfig  # with the real runs' KV pool
    reals: list[StoredRun]


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


def _workload(directory: Path) -> Workload:
    path = directory / "config.json"
    if not path.is_file():
        raise UserError(f"{directory}: no config.json; expected what batchlab validate --out wrote")
    config = _json(path).get("workload")
    if not isinstance(config, dict):
        raise UserError(f"{path}: no workload table; expected what batchlab validate --out wrote")
    try:
        return build_workload(WorkloadConfig(**config))
    except ValidationError as e:
        err = e.errors()[0]
        raise UserError(f"{path}: workload.{'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def _run(d: Path) -> StoredRun:
    from calibration.served_runs import read_steps

    meta = _json(d / "meta.json")
    if meta.get("world") != "real":
        raise UserError(f"{d}/meta.json: not a real run (world {meta.get('world')!r})")
    try:
        steps = read_steps(d / "steps.csv", str(d))
    except ValueError as e:
        raise UserError(str(e)) from None
    # JSON keeps an undefined statistic (TPOT of one-token replies) as null
    summary = {k: math.nan if v is None else v for k, v in _json(d / "summary.json").items()}
    return StoredRun(d, meta, summary, steps)


def _lengths(path: Path) -> tuple[list[int], list[int]]:
    """(prompt_len, output_len) of every request of a stored requests.csv, by request id."""
    try:
        with open(path, newline="") as f:
            rows = sorted(csv.DictReader(f), key=lambda r: int(r["request_id"]))
        return [int(r["prompt_len"]) for r in rows], [int(r["output_len"]) for r in rows]
    except (OSError, KeyError, ValueError) as e:
        raise UserError(f"{path}: cannot read its request_id, prompt_len, output_len ({e})") from None


def _scheduler(run: StoredRun) -> SchedulerConfig:
    settings = run.meta.get("scheduler")
    if not isinstance(settings, dict):
        raise UserError(f"{run.where}/meta.json records no scheduler settings (a run stored "
                        f"before batchlab recorded them); serve it again to re-judge it")
    try:
        sched = SchedulerConfig(**settings)
    except ValidationError as e:
        err = e.errors()[0]
        raise UserError(f"{run.where}/meta.json: scheduler.{'.'.join(map(str, err['loc']))}: "
                        f"{err['msg']}") from None
    return sched.model_copy(update={"num_kv_blocks": int(run.meta["num_kv_blocks"]),
                                    "block_size": int(run.meta["block_size"])})


def _policy_dirs(d: Path) -> list[Path]:
    """The folders holding a real run, in the order validate ran them (comparison.json's)."""
    found = sorted(p for p in d.iterdir() if (p / "real" / "meta.json").is_file())
    ran = list(_json(d / "comparison.json")) if (d / "comparison.json").is_file() else []
    return sorted(found, key=lambda p: ran.index(p.name) if p.name in ran else len(ran))


def read_cells(directory: str | Path) -> list[StoredCell]:
    """Every policy folder of a stored validation, its real runs in order."""
    d = Path(directory)
    if not d.is_dir():
        raise UserError(f"{d}: not a directory")
    workload = _workload(d)
    cells = []
    for policy_dir in _policy_dirs(d):
        names = ["real"] + sorted((p.name for p in policy_dir.glob("real_*") if p.is_dir()),
                                  key=lambda n: int(n.split("_")[1]) if n.split("_")[1].isdigit() else 0)
        reals = [_run(policy_dir / n) for n in names]
        prompts, outputs = _lengths(policy_dir / "real" / "requests.csv")
        if (prompts, outputs) != ([int(x) for x in workload.prompt_len],
                                  [int(x) for x in workload.output_len]):
            raise UserError(f"{d}/config.json: its workload does not rebuild the requests "
                            f"{policy_dir.name}/real served (a trace file changed?)")
        cells.append(StoredCell(policy_dir, workload, _scheduler(reals[0]), reals))
    if not cells:
        raise UserError(f"{d}: no POLICY/real/meta.json; expected what batchlab validate --out wrote")
    return cells
