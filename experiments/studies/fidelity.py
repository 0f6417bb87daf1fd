"""Fidelity: does the calibrated simulator predict served runs, measured beside the
hardware's own noise? Per workload shape x policy, the real side is served several times
and the profile judged on it exactly as `batchlab validate --repeats N` judges
(experiments/validation/judge.py): the errors raw and normalised by each run's measured
machine speed, what the real runs' spread leaves undecidable, KS and TOST per latency
distribution, the step kinds the profile misprices, the per-step test, and CDF plots of
the simulation against the band of the real runs.

Plan: four workloads of different shapes, two policies, each real run repeated, on
batchlab-tiny with one torch thread; the profile is calibrated here first (or --profile).
The study always serves on the CPU torch backend (docs/validation.md)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from batchlab.core.config import SchedulerConfig
from batchlab.core.workload import WorkloadConfig, build_workload
from batchlab.experiments import figures as fg
from batchlab.experiments.machine_speed import DRIFT_WINDOW_S
from batchlab.experiments.markdown import fmt, table
from batchlab.experiments.studies.common import command_line, pick
from batchlab.experiments.studies.output import StudyRun
from batchlab.experiments.studies.registry import register
from batchlab.experiments.studies.templates import template
from batchlab.experiments.validation import profile_source
from batchlab.experiments.validation.judge import Judge
from batchlab.experiments.validation.numbers import drifts, speeds
from batchlab.experiments.validation.output import ValidationWriter, figures as cell_figures
from batchlab.experiments.validation.per_step import describe as describe_per_step
from batchlab.experiments.validation.records import JudgedCell, KindRow, PerStep, ProfileInfo, Totals
from batchlab.experiments.validation.sources import serve_here

NAME = "fidelity"
MODEL, THREADS, SEATS, KV_MEMORY = "batchlab-tiny", 1, 32, "32MiB"
# Token budgets: whole prompts of up to 2048 tokens in one continuous-batching step,
# chunks of up to 512 with chunked prefill.
POLICIES = {"continuous": {"max_num_batched_tokens": 2048}, "chunked": {"max_num_batched_tokens": 512}}


@dataclass(frozen=True)
class Shape:
    name: str
    what: str
    fields: dict  # WorkloadConfig fields, apart from the size
    options: str  # the same as batchlab validate options


SHAPES = (
    Shape("chat", "open-loop Poisson chat mix (`chat` preset, replies clipped to 256 tokens)",
          {"source": "chat", "max_output_len": 256, "rate": 2.0},
          "--workload chat --max-output-len 256 --rate 2"),
    Shape("code-burst", "Azure 2023 code trace from t = 180 s, lengths / 4: bursty, prefill-heavy",
          {"source": "azure_code", "window_start_s": 180, "length_scale": 4, "rate": 2.5},
          "--workload azure_code --window-start 180 --length-scale 4 --rate 2.5"),
    Shape("long-prompt", "Mooncake trace, lengths / 8, prompts clipped to 2048 tokens: long prompts",
          {"source": "mooncake", "length_scale": 8, "max_prompt_len": 2048, "rate": 1.0},
          "--workload mooncake --length-scale 8 --max-prompt-len 2048 --rate 1"),
    Shape("closed-loop", "closed loop: 8 users on the chat preset, 0.2 s think time",
          {"source": "chat", "max_output_len": 256, "max_concurrency": 8, "think_time_s": 0.2},
          "--workload chat --max-output-len 256 --max-concurrency 8 --think-time 0.2"),
)

# requests per workload, real runs per cell
SIZES = {"full": {"requests": 48, "repeats": 3}, "small": {"requests": 6, "repeats": 2}}
SMALL_LIMITS = {"max_output_len": 12, "max_prompt_len": 128}  # --small: seconds per run


def workload_config(shape: Shape, size: str, sources: dict[str, str] | None = None) -> WorkloadConfig:
    """sources: a file for a shared trace's name (tests use tests/data's excerpts)."""
    fields = dict(shape.fields)
    fields["source"] = (sources or {}).get(fields["source"], fields["source"])
    if size == "small":
        for k, v in SMALL_LIMITS.items():
            fields[k] = min(fields.get(k, v), v)
        if "rate" in fields:
            fields["rate"] *= 4  # a few requests, still arriving apart
    return WorkloadConfig(**fields, num_requests=SIZES[size]["requests"])


def scheduler(policy: str) -> SchedulerConfig:
    return SchedulerConfig(policy=policy, max_num_seqs=SEATS, **POLICIES[policy])


# -- the served half (needs torch: imported inside) -------------------------------------
def _serve(study: StudyRun, size: str, profile: str | None, sources: dict[str, str] | None
           ) -> tuple[dict, list[fg.Figure]]:
    """Calibrate (or load the profile), serve and judge every cell: the result's measured
    part, and the CDF figures of every cell."""
    from batchlab.backend.runtime import Runtime  # lazy: torch (the served half)

    p = pick(SIZES, size)
    configs = {s.name: workload_config(s, size, sources) for s in SHAPES}
    workloads = {name: build_workload(c) for name, c in configs.items()}  # bad traces fail first
    rt = Runtime(MODEL, threads=THREADS, kv_memory=KV_MEMORY)
    prof, info = profile_source.resolve(profile, rt, study.out_dir)
    info = info.model_copy(update={"calibration_s": round(study.progress.elapsed, 1)})
    judge = Judge.of(prof, info)
    judged, shape_of, drawn = [], [], []
    for shape in SHAPES:
        folder = study.out_dir / "cells" / shape.name
        writer = ValidationWriter(folder, {"workload": configs[shape.name].model_dump()})
        for policy in POLICIES:
            side = serve_here(rt, workloads[shape.name], scheduler(policy), judge.cost, info.describe,
                              repeats=p["repeats"], where=str(folder / policy))
            judged.append(judge.cell(side, info.as_dict()))
            shape_of.append(shape.name)
            writer.add(judged[-1], judge.report([j for j, s in zip(judged, shape_of) if s == shape.name]))
            drawn += [replace(f, filename=f"cells/{shape.name}/{f.filename}") for f in cell_figures(judged[-1])]
            c = judged[-1].cell
            v = c.totals.verdicts
            study.progress(f"{shape.name:12s} {policy:10s} {v.ok} ok, {v.miss} miss, {v.undecidable} undecidable, "
                           f"{v.overloaded} overloaded; real runs {'/'.join(map(str, c.stability.real))}, speed "
                           + speeds([s.factor for s in c.machine_speed], [s.compute_factor for s in c.machine_speed]))
    v = judge.report(judged)
    return {"requests": p["requests"], "repeats": p["repeats"], "profile": info.as_dict(),
            "machine": rt.meta().cpu,
            "shapes": {s.name: {"what": s.what, "options": s.options, "workload": workloads[s.name].describe()}
                       for s in SHAPES},
            "cells": [{"workload": s, **j.cell.as_dict()} for s, j in zip(shape_of, judged)],
            "totals": v.totals.as_dict(), "per_step": v.per_step.as_dict(),
            "step_kinds": [k.as_dict() for k in v.step_kinds]}, drawn


# -- the report: tables from the result read back typed, prose in templates/fidelity.md --
COLUMNS = [(f"{s}_{m}_ms", f"{lab} {st}") for m, lab in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2E"))
           for s, st in (("mean", "mean"), ("median", "p50"), ("p90", "p90"), ("p99", "p99"))]
COLUMNS.append(("request_throughput", "thr."))
DRIFT_NOTED = 0.10  # a run whose speed moved more than this within it is counted in the summary
LEAN_LIMIT = 0.60  # an unbiased profile is faster in about half the numbers: flag a lean past this
HEAD = ["workload", "policy", *(lab for _, lab in COLUMNS)]


def _mark(err: float | None, verdict: str | None) -> str:
    if err is None or err != err:
        return "-"
    text = f"{err * 100:+.1f}"
    return {"miss": f"**{text}**", "undecidable": f"{text}~", "overloaded": f"{text}!"}.get(verdict, text)


def error_table(cells: list[tuple[str, JudgedCell]], normalised: bool) -> str:
    return table(HEAD, [[w, c.policy] + [_mark(m.error_normalised, m.verdict_normalised) if normalised
                                         else _mark(m.error, m.verdict) for m in map(c.row, (k for k, _ in COLUMNS))]
                        for w, c in cells])


def spread_table(cells: list[tuple[str, JudgedCell]]) -> str:
    return table(HEAD, [[w, c.policy] + [fmt(None if m.spread.range is None else m.spread.range * 100, "{:.1f}")
                                         + ("" if m.sim_inside else "*") for m in map(c.row, (k for k, _ in COLUMNS))]
                        for w, c in cells])


def _test(p: float | None, value: float | None, decides: bool) -> str:
    if p is None or p != p:
        return "-"
    return f"{value:.2f} ({p:.2g})" + ("" if decides else "†")


def tests_table(cells: list[tuple[str, JudgedCell]]) -> str:
    heads = ["workload", "policy"]
    for d in cells[0][1].diagnostics.distributions:
        heads += [f"{d.metric} KS D (p)", f"{d.metric} TOST ratio (p)"]
    return table(heads, [[w, c.policy] + [x for d in c.diagnostics.distributions
                                           for x in (_test(d.ks.p, d.ks.statistic, d.ks_decides),
                                                     _test(d.tost.p, d.tost.ratio, d.tost_decides))]
                         for w, c in cells])


def _share(x: float | None) -> str:
    return fmt(None if x is None else x * 100, "{:.1f}%")


def kinds_table(kinds: list[KindRow]) -> str:
    return table(["step kind", "steps", "measured / profile", "normalised", "|error| raw", "|error| normalised"],
                 [[k.kind, k.steps, fmt(k.ratio, "{:.3f}"), fmt(k.ratio_normalised, "{:.3f}"), _share(k.ape),
                   _share(k.ape_normalised)] for k in kinds])


def conditions_table(cells: list[tuple[str, JudgedCell]]) -> str:
    rows = []
    for w, c in cells:
        d, first = c.diagnostics, c.diagnostics.runs[0]
        rows.append([w, c.policy, "/".join(map(str, c.stability.real)), c.stability.sim,
                     speeds([s.factor for s in c.machine_speed], [s.compute_factor for s in c.machine_speed], 2),
                     drifts([s.drift for s in d.speeds]) or "-", fmt(first.cpu_share, "{:.2f}"),
                     fmt(first.others_cpu, "{:.2f}"), _share(d.step_error.median_ape),
                     fmt(None if d.step_error.total_error is None else d.step_error.total_error * 100, "{:+.1f}%"),
                     fmt(first.wall_s, "{:.1f}")])
    return table(["workload", "policy", "real runs", "sim", "machine speed per run (memory/compute)",
                  "its drift within each run", "CPU share (1st run)", "others' CPUs", "step APE p50",
                  "step time total", "real wall (s)"], rows)


def drift_sentence(cells: list[JudgedCell]) -> str:
    """How far the machine's speed moved within the real runs (experiments.machine_speed.drift):
    what one factor per run cannot normalise."""
    moved = [s.drift for c in cells for s in c.diagnostics.speeds if s.drift is not None]
    if not moved:
        return ""
    return template(NAME)("drift", median=float(np.median(moved)), big=sum(d > DRIFT_NOTED for d in moved),
                          runs=len(moved), noted=DRIFT_NOTED, window=DRIFT_WINDOW_S) + " "


def lean_sentence(fast: int, latency: int) -> str:
    """Where the normalised simulation leans one way, what to do about it: across fidelity
    passes the lean moved with the profile far more than with the runs judged, and a profile
    refined on served runs of other times leaned neither way (docs/results)."""
    if not latency or (1 - LEAN_LIMIT) * latency <= fast <= LEAN_LIMIT * latency:
        return ""
    way = "faster" if fast > LEAN_LIMIT * latency else "slower"
    return " " + template(NAME)("lean", way=way, share=fast if way == "faster" else latency - fast,
                                latency=latency, limit=LEAN_LIMIT)


def report(r: dict) -> str:
    """report.md from the study's result (live, or read back from study.json)."""

    cells = [(c["workload"], JudgedCell.model_validate(c)) for c in r["cells"]]
    t, profile = Totals.model_validate(r["totals"]), ProfileInfo.model_validate(r["profile"])
    undecided = sorted({u for _, c in cells for u in c.diagnostics.undecidable})
    tpl = template(NAME)
    return tpl("report", command=command_line(NAME, r["size"]), r=r, profile=profile, minutes=r["elapsed_s"] / 60,
               shapes=table(["workload", "what", "options"], [[n, s["what"], f"`{s['options']}`"]
                                                             for n, s in r["shapes"].items()]),
               drift=drift_sentence([c for _, c in cells]), t=t, undecided=", ".join(undecided) or "none",
               lean=lean_sentence(t.faster_normalised, t.latency_normalised),
               per_step=describe_per_step(PerStep.model_validate(r["per_step"])), error_raw=error_table(cells, False),
               error_normalised=error_table(cells, True), spread=spread_table(cells), tests=tests_table(cells),
               kinds=kinds_table([KindRow.model_validate(k) for k in r["step_kinds"]]),
               conditions=conditions_table(cells),
               cdfs="\n\n".join(f"![{w} {c.policy}](cells/{w}/{c.policy}/cdf_band.png)" for w, c in cells)) + "\n"


@register(NAME, "fidelity: calibrated simulator vs repeated real runs of four workload shapes "
                "(CPU torch backend, minutes): errors raw and speed-normalised, noise floor, "
                "KS/TOST, mispriced step kinds", profile=True, real_only=True, report=report)
def run(out_dir: Path, size: str = "full", backend: bool = False, quiet: bool = False,
        profile: str | None = None, sources: dict[str, str] | None = None) -> dict:
    """profile: a calibration profile (default: calibrate batchlab-tiny here first, saved
    as out_dir/profile.json). sources: files for the shared traces (tests: excerpts)."""
    study = StudyRun(NAME, out_dir, size, backend, quiet)
    measured, figures = _serve(study, size, profile, sources)
    result = {"name": NAME, "size": size, "model": MODEL, "threads": THREADS, "seats": SEATS,
              "kv_memory": KV_MEMORY, "policies": POLICIES, **measured, "files": fg.filenames(figures)}
    return study.finish(result, figures, report)
