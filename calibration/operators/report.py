"""A GPU profile's report (--from-operators): its constants, where each comes from, and
its held-out error tables; or, refined on batchlab's own steps, the constants refitted."""
from __future__ import annotations

from batchlab.calibration.fit.calibrated import Calibrated
from batchlab.calibration.operators.build import Built
from batchlab.calibration.operators.from_steps import Refined
from batchlab.core.cost.gpu_profile import ErrorStats, GpuProfile


def _row(name: str, s: ErrorStats) -> str:
    return f"  {name:<10} {s.n:>6}  {s.median:>7.1%}  {s.p90:>7.1%}  {s.share_high:>7.0%}"


def error_table(title: str, stats: dict[str, ErrorStats]) -> list[str]:
    lines = [title, f"  {'':<10} {'shapes':>6}  {'median':>7}  {'p90':>7}  {'high':>7}"]
    return lines + [_row(k, s) for k, s in stats.items()]


def heldout_tables(p: GpuProfile) -> list[str]:
    h = p.heldout
    out = [f"held out: {h.scheme}"]
    if h.overall.n:  # nothing held out: no table of zeros that would read as 0.0% error
        out += [*error_table("per-step |error| by region (decode < 128 tokens, ridge 128-512, prefill > 512)",
                             {**h.by_region, "all": h.overall}),
                *error_table("by TP degree", {f"TP {k}": v for k, v in h.by_tp.items()})]
    if h.attention:
        out += error_table("attention kernels (held-out context lengths)", h.attention)
    if h.allreduce:
        out += error_table("all-reduce table against its raw timings", {"all-reduce": h.allreduce})
    return out


def _written(p: GpuProfile) -> str:
    return f"GPU profile written to {{out}}; simulate with --hardware {p.gpu} --gpu-profile {{out}}"


def built_report(built: Built) -> Calibrated:
    p = built.profile
    tps = ", ".join(map(str, p.fitted_on.tensor_parallel))
    lines = [f"GPU profile for {p.gpu}: {p.fitted_on.shapes} layer shapes of {len(p.fitted_on.models)} models at TP {tps}",
             f"source: {p.source}"]
    lines += [f"skipped {s}" for s in built.skipped]
    lines.append("constants:")
    for name, c in p.params.items():
        err = f" +- {c.stderr:.3g}" if c.stderr is not None else ""
        rng = f" (range {c.low:.3g}-{c.high:.3g})" if c.low is not None and c.high is not None else ""
        lines.append(f"  {name:<28} {c.value:.4g}{err}{rng}  {c.source}")
    lines += heldout_tables(p)
    if built.steps:
        lines += error_table("whole steps, the layer's operators and attention (the one model shape and "
                             "TP degree with attention timed; each half held out)", built.steps)
    lines += [f"assumes: {a}" for a in p.assumptions]
    lines.append(f"fit {built.fit_s:.1f} s; held-out judgment {built.judge_s:.1f} s")
    summary = {"heldout": p.heldout.model_dump(), "fit_s": built.fit_s, "judge_s": built.judge_s}
    return Calibrated(p, lines, summary, written=_written(p))


def refined_report(refined: Refined, base_where: str) -> Calibrated:
    p = refined.profile
    head = (f"GPU profile for {p.gpu} refined on {refined.fitted_steps} of batchlab's steps "
            f"(from {base_where}); {refined.judged_steps} held out")
    lines = [head, "constants:"]
    for name, c in p.params.items():
        if c.source.startswith("refitted"):
            err = f" +- {c.stderr:.3g}" if c.stderr is not None else ""
            bound = "  (at its bound: these steps do not resolve it)" if name in refined.at_bound else ""
            lines.append(f"  {name:<28} {c.value:.4g}{err}{bound}")
    if refined.at_bound:
        lines.append(f"warning: {', '.join(refined.at_bound)} ended at a bound: the steps' times are not "
                     f"the kernels' (a host-bound engine, or too few shapes); price with the "
                     f"public-data profile instead")
    lines.append(f"held out: {p.heldout.scheme}")
    lines += error_table("per-step |error| by region", {**p.heldout.by_region, "all": p.heldout.overall})
    summary = {"base": base_where, "fitted_steps": refined.fitted_steps, "judged_steps": refined.judged_steps,
               "at_bound": list(refined.at_bound), "heldout": p.heldout.model_dump()}
    return Calibrated(p, lines, summary, written=_written(p))
