"""The stored source of a validation (sources.py): real runs read back from what `batchlab
validate --out` (and the fidelity study's cells/WORKLOAD folders, which it writes the same
way) stored: DIR/config.json with the workload, DIR/POLICY/real, real_2, ... each with
meta.json (the scheduler settings among them), summary.json and steps.csv, run folders
read by core/run_folder.py (through calibration/served/runs.py, which keeps the real ones
with their step tables). What `validate --real` needs to simulate the identical request
list again with another profile; folders of the simulated runs beside them (sim/,
sim_normalised/, and the sim_overhead/, sim_scaled/, sim_selffit/ of older versions) are
not read. Every problem is a UserError of one line naming the file and what is missing."""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Callable, TypeVar

from pydantic import ValidationError

from batchlab.calibration.served.from_run import model_mismatch, setting_mismatches
from batchlab.calibration.served.runs import ServedRun, read_runs
from batchlab.core.config import SchedulerConfig
from batchlab.core.kv_tiers import TierConfig
from batchlab.core.run_folder import RunFolder, read_object
from batchlab.core.sizes import MAX_MACHINE_BYTES, gib
from batchlab.core.workload import Workload, WorkloadConfig, build_workload
from batchlab.experiments.errors import UserError, describe_validation_error, warn
from batchlab.experiments.validation.records import Validation
from batchlab.experiments.validation.sources import RealRun, RealSide


T = TypeVar("T")


def _user(read: Callable[[], T]) -> T:
    """What a run folder reader returns, its one-line ValueError a UserError."""
    try:
        return read()
    except ValueError as e:
        raise UserError(str(e)) from None


def _object(path: Path, where: Path) -> dict:
    return _user(lambda: read_object(path, str(where)))


def _workload(directory: Path) -> Workload:
    path = directory / "config.json"
    if not path.is_file():
        raise UserError(f"{directory}: no config.json; expected what batchlab validate --out wrote")
    config = _object(path, directory).get("workload")
    if not isinstance(config, dict):
        raise UserError(f"{path}: no workload table; expected what batchlab validate --out wrote")
    try:
        return build_workload(WorkloadConfig(**config))
    except ValidationError as e:
        raise UserError(describe_validation_error(e, f"{path}: workload")) from None


def _tier(directory: Path) -> TierConfig | None:
    """The KV tier the runs swapped to (config.json's kv_tier; None without one): the
    simulation gets it too."""
    path = directory / "config.json"
    table = _object(path, directory).get("kv_tier")
    try:
        return None if table is None else TierConfig(**table)
    except (TypeError, ValidationError) as e:
        raise UserError(f"{path}: kv_tier: {e}".splitlines()[0]) from None


def _stored(run: ServedRun) -> RealRun:
    """A served run (calibration/served/runs.py) with the summary stored beside it."""
    return RealRun(str(run.where), run.meta, _user(run.source.summary), run.steps)


def _scheduler(run: RealRun) -> SchedulerConfig:
    settings = run.meta.scheduler
    if not isinstance(settings, dict):
        raise UserError(f"{run.where}/meta.json records no scheduler settings (a run stored "
                        f"before batchlab recorded them); serve it again to re-judge it")
    # The KV pool it served with, validated with the rest (model_copy would skip the bounds)
    pool = {name: _count(run, name) for name in ("num_kv_blocks", "block_size")}
    _check_pool(run, pool["num_kv_blocks"], pool["block_size"])
    try:
        return SchedulerConfig(**{**settings, **pool})
    except ValidationError as e:
        raise UserError(describe_validation_error(e, f"{run.where}/meta.json: scheduler")) from None


def _check_pool(run: RealRun, blocks: int, block_size: int) -> None:
    """A pool no machine could hold was never served: a real run's --num-kv-blocks is
    refused beyond its device's free memory (backend/runtime.py), a stored one beyond any
    machine's (what its device had is not recorded)."""
    per_token = run.meta.kv_bytes_per_token
    if per_token is None or isinstance(per_token, bool) or not per_token > 0:
        return  # a run stored before batchlab recorded it
    need = blocks * block_size * float(per_token)
    if need > MAX_MACHINE_BYTES:
        raise UserError(f"{run.where}/meta.json: num_kv_blocks {blocks:,} of {block_size} tokens at "
                        f"{per_token:,} bytes a token would need {gib(need)} of KV cache; no machine "
                        f"holds more than {gib(MAX_MACHINE_BYTES)}, so no real run served it")


def _count(run: RealRun, name: str) -> int:
    """A whole-number field of the run's meta.json (the KV pool it served with), or a
    one-line error naming it."""
    value = getattr(run.meta, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{run.where}/meta.json: {name} is {value!r}; expected a whole number >= 1, "
                        f"as batchlab run wrote")
    return value


def _by_policy(d: Path) -> dict[Path, list[RealRun]]:
    """The real runs of each policy folder (real, real_2, ...), policies in the order
    validate ran them (comparison.json's)."""
    if not any(d.glob("*/real/meta.json")):
        raise UserError(f"{d}: no POLICY/real/meta.json; expected what batchlab validate --out wrote")
    runs = _user(lambda: read_runs(d))  # POLICY/real* of validate, each a real run with its steps
    groups: dict[Path, list[RealRun]] = {}
    for r in runs:
        run = _stored(r)
        groups.setdefault(Path(run.where).parent, []).append(run)
    ran = _policies_ran(d)
    return dict(sorted(groups.items(), key=lambda g: ran.index(g[0].name) if g[0].name in ran else len(ran)))


def _policies_ran(d: Path) -> list[str]:
    """The policies in the order validate ran them: its comparison.json's cells (records.py
    Validation), or the keys of one written before the judgement was one (keyed by policy)."""
    path = d / "comparison.json"
    if not path.is_file():
        return []
    written = _object(path, d)
    if "cells" not in written:
        return list(written)
    try:
        return [c.policy for c in Validation.model_validate(written).cells]
    except ValidationError as e:
        raise UserError(describe_validation_error(e, str(path))) from None


def read_cells(directory: str | Path) -> list[RealSide]:
    """Every policy folder of a stored validation, its real runs in order."""
    d = Path(directory)
    if not d.is_dir():
        raise UserError(f"{d}: not a directory")
    workload, tier = _workload(d), _tier(d)
    cells = []
    for policy_dir, reals in _by_policy(d).items():
        first = policy_dir / "real"
        prompts, outputs = _user(RunFolder(first, str(first), reals[0].meta).lengths)
        if (prompts, outputs) != ([int(x) for x in workload.prompt_len],
                                  [int(x) for x in workload.output_len]):
            raise UserError(f"{d}/config.json: its workload does not rebuild the requests "
                            f"{policy_dir.name}/real served (a trace file changed?)")
        schedulers = [_scheduler(r) for r in reals]  # every run's settings read and checked
        for r, sched in zip(reals[1:], schedulers[1:]):
            if sched != schedulers[0]:
                raise UserError(f"{r.where}/meta.json: scheduler settings differ from "
                                f"{reals[0].where}'s; the runs of one policy serve one setting")
        cells.append(RealSide(str(policy_dir), workload, schedulers[0], reals, kv_tier=tier,
                              kv_bytes_per_token=float(reals[0].meta.kv_bytes_per_token or 0.0)))
    return cells


def check_profile(cells: list[RealSide], profile, where: str) -> None:
    """The stored runs served the profile's model (else an error); another device, thread
    count or dtype is a warning, as validate warns."""
    warned = set()
    for c in cells:
        for r in c.reals:
            wrong = model_mismatch(r, profile, where)
            if wrong:
                raise UserError(wrong)
            for why in (w.split(": ", 1)[-1] for w in setting_mismatches(r, profile, where)):
                if why not in warned:
                    warned.add(why)
                    warn(f"{r.where} (and any other like it): {why}")


def same_work_apart(cells: list[RealSide]) -> list[tuple[dict, dict]]:
    """The first real runs of every two stored validations (each directory once) that
    served the identical request list with the same scheduler settings: the per-step
    test's spread between validations served at other times (per_step.py)."""
    groups: dict[tuple, dict[Path, dict]] = {}
    for c in cells:
        w = c.workload
        key = (w.arrival.tobytes(), w.prompt_len.tobytes(), w.output_len.tobytes(), w.max_concurrency,
               w.think_time_s, c.scheduler.model_dump_json())
        groups.setdefault(key, {}).setdefault(Path(c.where).resolve(), c.reals[0].steps)
    return [pair for g in groups.values() for pair in itertools.combinations(g.values(), 2)]
