"""A sweep file: an experiment config (the same sections as any command's) plus
[grid], lists of values for config fields, and [sweep], what each point does.

    [grid]
    policy = ["continuous", "chunked"]            # short names for common fields
    "scheduler.max_num_seqs" = [128, 256, 1024]   # or section.field for any field
    [grid.hardware]                               # or a table per section
    name = ["h100-sxm", "h200"]

Points are the product of the lists, in file order (the last key varies fastest).
Each is keyed by a hash of its whole config and the [sweep] settings, so a resumed
sweep knows what is done and a changed grid reruns only what changed."""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from batchlab.experiments.config import ExperimentConfig, build_config, read_toml
from batchlab.experiments.errors import UserError, describe_validation_error
from batchlab.experiments.limits import check_grid, check_samples
from batchlab.experiments.options import merge

ALIASES = {"policy": "scheduler.policy", "max_num_seqs": "scheduler.max_num_seqs",
           "max_num_batched_tokens": "scheduler.max_num_batched_tokens", "model": "model.name",
           "dtype": "model.dtype", "kv_cache_dtype": "model.kv_cache_dtype",
           "hardware": "hardware.name", "tp": "hardware.tensor_parallel",
           "replicas": "run.replicas", "router": "run.router", "rate_scale": "workload.rate_scale",
           "rate": "workload.rate", "mem_efficiency": "hardware.mem_efficiency",
           "compute_efficiency": "hardware.compute_efficiency",
           "step_overhead_s": "hardware.step_overhead_s"}


class SweepSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    point: Literal["simulate", "max-rate", "replicas"] = Field(
        "simulate", description="what each point is: one simulation, or a capacity search")
    seeds: int = Field(1, ge=1, description="samples per point: workload seeds")
    windows: int = Field(1, ge=1, description="samples per point: equal windows of the trace")
    percentile: Literal[50, 90, 99] = 99
    goodput: float | None = Field(None, gt=0, le=1)
    max_rejected_share: float = Field(0.0, ge=0, lt=1, description="rejected + unfinished requests "
                                      "a passing point may leave, as a share of all (default 0)")
    count_too_long: bool = Field(False, description="count requests longer than the model's context "
                                 "against max_rejected_share (default: reported, not failing)")
    gpu_hour_price: float | None = Field(None, gt=0, description="USD per GPU-hour: Pareto on cost")
    max_replicas: int = Field(64, ge=1)
    tolerance: float = Field(0.02, gt=0, lt=1)
    pareto_metric: str | None = Field(None, description="the latency (or goodput) axis; default "
                                      "p99_ttft_ms (simulate, replicas) or the max rate (max-rate)")


@dataclass(frozen=True)
class Point:
    index: int
    values: dict[str, Any]  # grid field -> this point's value
    config: ExperimentConfig
    key: str  # hash of the config and the settings


@dataclass
class Sweep:
    path: str
    settings: SweepSettings
    fields: list[str]
    points: list[Point]


def load_sweep(path: str) -> Sweep:
    data = read_toml(path)
    grid = data.pop("grid", None)
    try:
        settings = SweepSettings.model_validate(data.pop("sweep", {}), strict=True)
    except ValidationError as e:
        raise UserError(describe_validation_error(e, f"{path}: [sweep]")) from None
    if not isinstance(grid, dict) or not grid:
        raise UserError(f"{path}: needs a [grid] table of lists, e.g. policy = [\"continuous\", \"chunked\"]")
    axes = _axes(path, grid)
    check_grid(path, [len(v) for v in axes.values()])  # before a single point is built
    check_samples(f"{path}: [sweep] seeds = {settings.seeds}, windows = {settings.windows}",
                  settings.seeds * settings.windows)
    fields = list(axes)
    build_config(copy.deepcopy(data), where=path)  # the base alone must be valid
    points = []
    for i, combo in enumerate(itertools.product(*axes.values())):
        values = dict(zip(fields, combo))
        cfg = _point_config(path, data, values)
        blob = json.dumps({"config": cfg.model_dump(mode="json"),
                           "sweep": settings.model_dump(mode="json")}, sort_keys=True)
        points.append(Point(i, values, cfg, hashlib.sha256(blob.encode()).hexdigest()[:16]))
    return Sweep(path, settings, fields, points)


def _axes(path: str, grid: dict) -> dict[str, list]:
    """Flatten [grid] (dotted keys, aliases, per-section tables) to field -> values."""
    flat: dict[str, Any] = {}
    for key, value in grid.items():
        if isinstance(value, dict):  # [grid.scheduler] max_num_seqs = [...]
            for k, v in value.items():
                flat[f"{key}.{k}"] = v
        else:
            flat[ALIASES.get(key, key)] = value
    for field, values in flat.items():
        _check_field(path, field)
        if not isinstance(values, list):
            raise UserError(f"{path}: [grid] {field}: expected a list of values, got {values!r}")
        if not values:
            raise UserError(f"{path}: [grid] {field}: empty list of values; give at least one")
    return flat


def _check_field(path: str, field: str) -> None:
    parts = field.split(".")
    model: type[BaseModel] = ExperimentConfig
    for depth, part in enumerate(parts):
        fields = model.model_fields
        if part not in fields:
            where = ".".join(parts[:depth]) or "the config"
            known = ", ".join(fields) if depth else ", ".join(fields) + "; or " + ", ".join(ALIASES)
            raise UserError(f"{path}: [grid] {field}: no field {part!r} in {where} (expected one of {known})")
        ann = fields[part].annotation
        sub = next((a for a in getattr(ann, "__args__", (ann,))
                    if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if depth < len(parts) - 1:
            if sub is None:
                raise UserError(f"{path}: [grid] {field}: {'.'.join(parts[:depth + 1])} has no fields")
            model = sub
    if len(parts) == 1:
        raise UserError(f"{path}: [grid] {field}: a section, not a field; give section.field "
                        f"(e.g. scheduler.max_num_seqs) or one of {', '.join(ALIASES)}")


def _point_config(path: str, base: dict, values: dict[str, Any]) -> ExperimentConfig:
    data = copy.deepcopy(base)
    for field, v in values.items():
        *sections, last = field.split(".")
        nested: dict[str, Any] = {}
        leaf = nested
        for s in sections:
            leaf = leaf.setdefault(s, {})
        leaf[last] = v
        merge(data, nested)
    if "scheduler.policy" in values:  # the grid's policy is the point's one policy
        data.get("run", {}).pop("policies", None)
    where = f"{path}: grid point " + ", ".join(f"{k}={v!r}" for k, v in values.items())
    cfg = build_config(data, where=where)
    if len(cfg.policies()) > 1:
        raise UserError(f"{path}: a sweep point runs one policy; list them in [grid] policy "
                        f"instead of [run] policies")
    return cfg
