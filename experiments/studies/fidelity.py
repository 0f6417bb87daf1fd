"""Fidelity: does the calibrated simulator predict served runs, measured beside the
hardware's own noise? Calibrates batchlab-tiny (or takes --profile), then per workload
shape x policy serves the real side several times and simulates the identical request
list (`batchlab validate --repeats N`), and reports the errors raw and normalised by each
run's measured machine speed, what the real runs' spread leaves undecidable, the KS and
TOST tests per latency distribution, the step kinds the profile misprices, and CDF plots
of the simulation against the band of the real runs."""
from __future__ import annotations

import json
from pathlib import Path

from batchlab.core.workload import build_workload
from batchlab.experiments.output import to_json
from batchlab.experiments.studies.common import Progress, pick
from batchlab.experiments.studies.fidelity_plan import (KV_MEMORY, MODEL, NAME, POLICIES, SEATS, SHAPES,
                                               SIZES, THREADS, scheduler, workload_config)
from batchlab.experiments.studies.registry import register
from batchlab.experiments.validation.repeats_text import speeds


def _cell(shape, policy: str, comp: dict) -> dict:
    """What the report needs of one validation (the full comparison is in cells/)."""
    rep = comp["repeats"]
    de = comp["steps"]["duration_error"]
    return {"workload": shape.name, "policy": policy, "metrics": rep["metrics"],
            "distributions": rep["distributions"], "counts": rep["counts"],
            "counts_normalised": rep["counts_normalised"], "undecidable": rep["undecidable"],
            "stability": rep["stability"], "machine_speed": rep["machine_speed"],
            "compute_speed": rep["compute_speed"], "speed_drift": rep.get("speed_drift"),
            "cpu_share": comp["real"].get("cpu_share"), "others_cpu": comp["real"].get("others_cpu"),
            "real_wall_s": comp["real"].get("wall_s"), "steps_real": comp["steps"]["real_steps"],
            "step_ape_all": de["all_real"]["median_ape"], "step_total_error": de["all_real"]["total_error"],
            "first_divergence": comp["steps"]["first_divergence"]}


@register(NAME, "fidelity: calibrated simulator vs repeated real runs of four workload shapes "
                "(CPU torch backend, minutes): errors raw and speed-normalised, noise floor, "
                "KS/TOST, mispriced step kinds", profile=True, real_only=True)
def run(out_dir: Path, size: str = "full", backend: bool = False, quiet: bool = False,
        profile: str | None = None, sources: dict[str, str] | None = None) -> dict:
    """profile: a calibration profile (default: calibrate batchlab-tiny here first, saved
    as out_dir/profile.json). sources: files for the shared traces (tests: excerpts)."""
    from batchlab.backend.runtime import Runtime  # needs torch
    from batchlab.experiments.studies.fidelity_report import render
    from batchlab.experiments.validation import profile_source
    from batchlab.experiments.validation.output import ValidationWriter
    from batchlab.experiments.validation.per_step import per_step
    from batchlab.experiments.validation.step_kinds import kind_table
    from batchlab.experiments.validation.validate import validate

    p = pick(SIZES, size)
    configs = {s.name: workload_config(s, size, sources) for s in SHAPES}
    workloads = {name: build_workload(c) for name, c in configs.items()}  # bad traces fail first
    out_dir.mkdir(parents=True, exist_ok=True)
    progress = Progress(NAME, quiet)
    rt = Runtime(MODEL, threads=THREADS, kv_memory=KV_MEMORY)
    prof, info = profile_source.resolve(profile, rt, out_dir)
    info["calibration_s"] = round(progress.elapsed, 1)
    cost = prof.cost_model()
    cells, cell_runs = [], []
    for shape in SHAPES:
        writer = ValidationWriter(out_dir / "cells" / shape.name, {"workload": configs[shape.name].model_dump()})
        for policy in POLICIES:
            v = validate(rt, workloads[shape.name], scheduler(policy), cost, profile=info,
                         loop=prof.loop_overhead(),
                         repeats=p["repeats"])
            comp = v.comparison()
            writer.add(v, comp)
            cells.append(_cell(shape, policy, comp))
            cell_runs.append([(r.result.steps, r.result.meta.machine_speed) for r in v.reals])
            c = cells[-1]["counts"]
            progress(f"{shape.name:12s} {policy:10s} {c['ok']} ok, {c['miss']} miss, "
                     f"{c['undecidable']} undecidable, {c['overloaded']} overloaded; real runs "
                     f"{'/'.join(cells[-1]['stability']['real'])}, speed "
                     + speeds(cells[-1]["machine_speed"], cells[-1]["compute_speed"]))
    result = {"name": NAME, "size": size, "model": MODEL, "threads": THREADS, "seats": SEATS,
              "kv_memory": KV_MEMORY, "policies": POLICIES, "repeats": p["repeats"],
              "requests": p["requests"], "profile": info, "machine": rt.meta().get("cpu"),
              "shapes": {s.name: {"what": s.what, "options": s.options,
                                  "workload": workloads[s.name].describe()} for s in SHAPES},
              "cells": cells, "step_kinds": kind_table([r for runs in cell_runs for r in runs], cost),
              "per_step": per_step(cell_runs, cost),
              "elapsed_s": round(progress.elapsed, 1)}
    (out_dir / "study.json").write_text(to_json(result) + "\n")
    render(result).write(out_dir / "report.md")
    result["files"] = ["study.json", "report.md",
                       *[f"cells/{c['workload']}/{c['policy']}/cdf_band.png" for c in cells]]
    return result


def load_result(out_dir: Path) -> dict:
    return json.loads((out_dir / "study.json").read_text())
