"""The validation study (issue 6): three workloads x two policies x three load levels,
each served for real on the CPU backend (batchlab-tiny, one torch thread) and simulated
with a calibrated profile on the identical request list; the real run of some cells is
repeated to measure how far the hardware disagrees with itself.

Run it with benchmarks/validation_study.py; results in docs/validation.md."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from batchlab.core.config import SchedulerConfig
from batchlab.core.workload import WorkloadConfig, build_workload
from batchlab.experiments.output import to_json
from batchlab.experiments.studies.common import RowLog
from batchlab.experiments.validation import profile_source
from batchlab.experiments.validation.compare import STATS, TARGETED
from batchlab.experiments.validation.output import ValidationWriter, write_run
from batchlab.experiments.validation.pair import run_real
from batchlab.experiments.validation.validate import compare_runs, validate

MODEL, THREADS, SEATS, KV_MEMORY = "batchlab-tiny", 1, 32, "32MiB"
# Token budgets inside the calibration grid's reach: chunks of 512, whole prompts of up
# to 2048 tokens in one continuous-batching prefill step.
POLICIES = {"continuous": {"max_num_batched_tokens": 2048}, "chunked": {"max_num_batched_tokens": 512}}
WORKLOADS = {
    "chat": ("synthetic Poisson chat mix (`chat` preset, replies clipped to 512 tokens)",
             {"source": "chat", "max_output_len": 512}),
    "conv": ("Azure 2023 conversation trace, lengths / 4",
             {"source": "azure_conv", "length_scale": 4}),
    "code": ("Azure 2023 code trace from t = 180 s, lengths / 4 (bursty, prefill-heavy)",
             {"source": "azure_code", "window_start_s": 180, "length_scale": 4}),
}
# (mean rate req/s, requests): light (well under capacity), medium, saturated (queues
# build and, with a 32 MiB KV pool, sequences get preempted).
LOADS = {
    "chat": {"light": (1.5, 60), "medium": (3.0, 100), "saturated": (7.0, 150)},
    "conv": {"light": (2.0, 80), "medium": (4.0, 120), "saturated": (10.0, 200)},
    "code": {"light": (1.0, 50), "medium": (2.5, 80), "saturated": (6.0, 120)},
}
SPREAD = {("chat", "light"), ("chat", "medium"), ("conv", "saturated"), ("code", "medium")}  # repeated


@dataclass(frozen=True)
class Cell:
    workload: str
    load: str
    rate: float
    requests: int

    @property
    def name(self) -> str:
        return f"{self.workload}-{self.load}"

    def config(self, scale: float = 1.0) -> WorkloadConfig:
        n = max(4, int(self.requests * scale))
        return WorkloadConfig(**WORKLOADS[self.workload][1], rate=self.rate, num_requests=n)

    def options(self) -> str:
        """The same workload as `batchlab validate` options."""
        flags = {"source": "--workload", "max_output_len": "--max-output-len",
                 "length_scale": "--length-scale", "window_start_s": "--window-start"}
        parts = [f"{flags[k]} {v}" for k, v in WORKLOADS[self.workload][1].items()]
        return " ".join(parts + [f"--rate {self.rate:g}", f"--num-requests {self.requests}"])


def cells(only: list[str] | None = None) -> list[Cell]:
    out = [Cell(w, load, *LOADS[w][load]) for w in WORKLOADS for load in LOADS[w]]
    if only:
        out = [c for c in out if c.name in only or c.workload in only or c.load in only]
    return out


def scheduler(policy: str) -> SchedulerConfig:
    return SchedulerConfig(policy=policy, max_num_seqs=SEATS, **POLICIES[policy])


def _errors(prefix: str, comp: dict) -> dict:
    """Errors of the targeted cells, keyed `<prefix><stat>_<metric>`."""
    out = {}
    for m in comp["metrics"]:
        if m["target"] is not None:
            out[f"{prefix}{m['key'].removesuffix('_ms')}"] = m["error"]
    out[f"{prefix}worst"] = comp["worst_error"]
    return out


def row(cell: Cell, policy: str, comp: dict, spread: dict | None, elapsed: float,
        again: dict | None = None) -> dict:
    st, de = comp["steps"], comp["steps"]["duration_error"]
    r = {"cell": cell.name, "workload": cell.workload, "load": cell.load, "policy": policy,
         "rate": cell.rate, "requests": cell.requests, "elapsed_s": elapsed,
         "real_wall_s": comp["real"]["wall_s"], "cpu_share": comp["real"]["cpu_share"],
         "others_cpu": comp["real"].get("others_cpu"), "speed_factor": comp["speed_factor"]["all"],
         "speed_decode": comp["speed_factor"]["decode"], "speed_prefill": comp["speed_factor"]["prefill"],
         "loadavg": comp["real"]["loadavg_1min"][1], "misses": "; ".join(comp["misses"])}
    for m in comp["metrics"]:
        if m["target"] is not None:
            key = m["key"].removesuffix("_ms")
            r[f"real_{key}"], r[f"sim_{key}"] = m["real"], m["sim"]
    r.update(_errors("err_", comp))
    for variant, short in (("profile+overhead", "ovh_"), ("speed-scaled", "speed_"), ("self-fit", "self_")):
        r.update(_errors(short, comp["variants"][variant]))
    r.update({"steps_real": st["real_steps"], "steps_sim": st["sim_steps"],
              "first_divergence": st["first_divergence"], "matched_fraction": st["matched_fraction"],
              "step_ape_median": de["matched"]["median_ape"], "step_ape_p90": de["matched"]["p90_ape"],
              "step_ape_all_median": de["all_real"]["median_ape"],
              "step_total_error": de["all_real"]["total_error"],
              "step_ape_decode": de["decode_only"]["median_ape"],
              "step_ape_prefill": de["with_prefill"]["median_ape"],
              "ratio_decode": de["decode_only"]["median_ratio"],
              "ratio_prefill": de["with_prefill"]["median_ratio"],
              "ratio_after_idle": de["after_idle"]["median_ratio"],
              "steps_after_idle": de["after_idle"]["steps"],
              "preempt_real": comp["preemptions"]["real"]["preemptions"],
              "preempt_sim": comp["preemptions"]["sim"]["preemptions"],
              "gap_ms_per_step": comp["overhead_fit"]["mean_gap_ms"],
              "prep_share": comp["outside_forward"]["input_prep_share"],
              "divergence": comp["divergence"].get("reason", "")})
    if spread is not None:
        r.update(_errors("spread_", spread))
        r["cpu_share_again"] = again.get("cpu_share")
        r["others_cpu_again"] = again.get("others_cpu")
    return r


def columns() -> list[str]:
    stems = [f"{s}_{m}" for m in TARGETED for s, _ in STATS] + ["request_throughput", "output_throughput",
                                                                  "total_token_throughput"]
    cols = ["cell", "workload", "load", "policy", "rate", "requests", "elapsed_s", "real_wall_s",
            "cpu_share", "cpu_share_again", "others_cpu", "others_cpu_again", "loadavg", "speed_factor",
            "speed_decode", "speed_prefill"]
    cols += [f"{p}_{k}" for k in stems[:-3] for p in ("real", "sim")]
    for prefix in ("err_", "ovh_", "speed_", "self_", "spread_"):
        cols += [f"{prefix}{k}" for k in stems] + [f"{prefix}worst"]
    cols += ["misses", "steps_real", "steps_sim", "first_divergence", "matched_fraction",
             "step_ape_median", "step_ape_p90", "step_ape_all_median", "step_total_error",
             "step_ape_decode", "step_ape_prefill", "ratio_decode", "ratio_prefill",
             "ratio_after_idle", "steps_after_idle", "preempt_real", "preempt_sim",
             "gap_ms_per_step", "prep_share", "divergence"]
    return cols


def run_study(out_dir: Path, profile: str | None = None, only: list[str] | None = None,
              spread: set[tuple[str, str]] = SPREAD, scale: float = 1.0,
              say: Callable[[str], None] = print) -> dict:
    """Every cell x policy; rows appended to study.csv as they finish; per cell, what
    `batchlab validate --out` writes (tables, CDF plots, comparison.json) in cells/NAME/,
    with the repeated real run's comparison in cells/NAME/POLICY/real_vs_real.json.
    scale multiplies the request counts (0.1: a smoke test)."""
    from batchlab.backend.runtime import Runtime

    t_start = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "cells").mkdir(exist_ok=True)
    rt = Runtime(MODEL, threads=THREADS, kv_memory=KV_MEMORY)
    prof, info = profile_source.resolve(profile, rt, out_dir)
    info["calibration_s"] = round(time.perf_counter() - t_start, 1)
    cost = prof.cost_model()
    rows = []
    with RowLog(out_dir / "study.csv", columns()) as log:
        for cell in cells(only):
            w = build_workload(cell.config(scale))
            writer = ValidationWriter(out_dir / "cells" / cell.name, cell.config(scale).model_dump())
            for policy in POLICIES:
                t0 = time.perf_counter()
                v = validate(rt, w, scheduler(policy), cost, profile=info, loop=prof.loop_overhead())
                comp = v.comparison()
                rep = again = None
                if (cell.workload, cell.load) in spread:
                    again = run_real(rt, w, scheduler(policy))
                    rep = compare_runs(v.real, again, cost)
                rows.append(log.add(row(cell, policy, comp, rep, time.perf_counter() - t0,
                                        again.result.meta.as_dict() if again else None)))
                writer.add(v, comp)
                if rep:
                    (writer.dir / policy / "real_vs_real.json").write_text(to_json(rep) + "\n")
                    write_run(writer.dir / policy / "real_again", again)
                say(f"{cell.name:15s} {policy:10s} worst |err| {comp['worst_error']:.1%}, "
                    f"cpu share {comp['real']['cpu_share']}"
                    + (f", real-vs-real {rep['worst_error']:.1%}" if rep else "")
                    + f" ({time.perf_counter() - t0:.0f} s)")
    result = {"profile": info, "model": MODEL, "threads": THREADS, "seats": SEATS,
              "kv_memory": KV_MEMORY, "policies": POLICIES, "scale": scale,
              "elapsed_s": round(time.perf_counter() - t_start, 1), "rows": rows,
              "cells": {c.name: {"description": WORKLOADS[c.workload][0], "options": c.options()}
                        for c in cells(only)}}
    (out_dir / "study.json").write_text(to_json(result) + "\n")
    return result


def load_result(out_dir: Path) -> dict:
    return json.loads((out_dir / "study.json").read_text())
