"""The searches `batchlab capacity` runs: one per policy (max-rate) or candidate
(replicas), and with --sensitivity each again with every knob of its price
(experiments/setup/knobs.py: efficiencies, step overhead, all-reduce latency, and for
replicas the traffic's rate) at the low and the high end of its range. A task is a plain
tuple and run_task a top-level function, so that a process pool or Dask can ship them."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from batchlab.core.workload import WorkloadConfig, build_workload
from batchlab.experiments.capacity.point import Criteria
from batchlab.experiments.capacity.search import Answer, search_max_rate, search_replicas
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.setup import sim_setup
from batchlab.experiments.setup.knobs import price_knobs, with_knobs

class Variant(NamedTuple):
    """A sensitivity search: which knob, at which end, moved to what (from base)."""
    knob: str
    end: str  # "low" | "high"
    value: float
    label: str  # the search it varies (policy or candidate)
    base: float
    source: str  # where the knob's value and range come from
    search: int = 0  # which main search it varies (its index; a label can change as setups run)


def run_task(task: tuple) -> Answer:
    """One search; top level so that a process pool or Dask can ship it."""
    _, kind, cfg, criteria, samples, extra = task
    if kind == "max-rate":
        return search_max_rate(cfg, criteria, samples, rel_tol=extra)
    return search_replicas(cfg, criteria, samples, extra)


def build_tasks(kind: str, cfg: ExperimentConfig, criteria: Criteria, samples: list[WorkloadConfig],
                extra: float | int, candidates: list[str] | None, sensitivity: bool) -> list[tuple]:
    """(sensitivity variant or None, kind, cfg, criteria, samples, extra) per search;
    extra: max-rate's tolerance, or replicas' most replicas."""
    if kind == "max-rate":
        configs = [cfg.model_copy(update={"run": cfg.run.model_copy(update={"policies": [p]})}, deep=True)
                   for p in cfg.policies()]
    else:
        if len(cfg.policies()) > 1:
            raise UserError("capacity replicas sizes one policy; give one --policy")
        configs = [candidate(cfg, c) for arg in candidates or [] for c in arg.split(",") if c]
        configs = configs or [cfg]
    tasks = [(None, kind, c, criteria, samples, extra) for c in configs]
    if sensitivity:
        for i, c in enumerate(configs):
            for knob in price_knobs(c, traffic=kind == "replicas"):
                for end, v in (("low", knob.low), ("high", knob.high)):
                    if v != knob.value:
                        tasks.append((Variant(knob.name, end, v, _label(kind, c), knob.value, knob.source, i), kind,
                                      with_knobs(c, {knob.name: v}), criteria, samples, extra))
    return tasks


def _label(kind: str, c: ExperimentConfig) -> str:
    return c.policies()[0] if kind == "max-rate" else \
        f"{c.model.name} TP{c.hardware.tensor_parallel} {c.hardware.name}"


def candidate(cfg: ExperimentConfig, text: str) -> ExperimentConfig:
    """cfg with --candidate MODEL:TP:HARDWARE's model, tensor parallelism and GPU."""
    parts = text.split(":")
    if len(parts) != 3 or not parts[1].isdigit() or int(parts[1]) < 1:
        raise UserError(f"--candidate {text!r}: expected MODEL:TP:HARDWARE, e.g. llama-3-70b:4:h100-sxm")
    model, tp, hw = parts
    c = cfg.model_copy(deep=True)
    c.model.name, c.hardware.tensor_parallel, c.hardware.name = model, int(tp), hw
    return c


def busiest_window(cfg: ExperimentConfig, seconds: float) -> ExperimentConfig:
    """cfg cut to the busiest `seconds` of its trace (in the trace's own time)."""
    if seconds <= 0:
        raise UserError(f"--busiest-window must be > 0 seconds, got {seconds}")
    w = build_workload(cfg.workload.model_copy(update={"rate_scale": 1.0}))
    a = w.arrival
    ends = np.searchsorted(a, a + seconds, side="left")
    i = int(np.argmax(ends - np.arange(len(a))))
    c = cfg.model_copy(deep=True)
    c.workload.window_start_s = cfg.workload.window_start_s + float(a[i])
    c.workload.window_duration_s = seconds
    return c


def setup_or_none(cfg: ExperimentConfig):
    """The configuration's simulator setup, or None where it cannot be built (a model
    too large for its GPUs: an answer row, not an error)."""
    try:
        return sim_setup(cfg)
    except UserError:
        return None
