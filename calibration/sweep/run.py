"""calibrate(): load the backend, sweep the grid, fit, return (and save) a Profile."""
from __future__ import annotations

import datetime
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from tqdm import tqdm

from batchlab.backend.fast.options import FastPath
from batchlab.backend.models import params_label
from batchlab.backend.runtime import Runtime
from batchlab.calibration.fit.both_forms import DEFAULT_FORM, gpu_form_params
from batchlab.calibration.fit.fitted_form import fit
from batchlab.calibration.fit.gpu_form import fit_cpu_form
from batchlab.calibration.fit.profile_parts import cost_params, device_info, effective
from batchlab.calibration.sweep.aggregate import spread_pct, summarize
from batchlab.calibration.sweep.contention import MAX_CONTENDED_SHARE, ContendedCalibration, check_prices
from batchlab.calibration.sweep.grid import Grid, blocks_needed, default_grid, max_chunk, max_context
from batchlab.calibration.sweep.on_contention import on_contention_mode
from batchlab.calibration.sweep.runner import (Sweep, append_roofline, measurements_path, read_records,
                                               read_roofline, widest_points)
from batchlab.calibration.sweep.serve_phase import serve
from batchlab.calibration.sweep.timing import ReferenceKernel, roofline_for
from batchlab.core.features import StepFeatures
from batchlab.core.cost.fitted import Shape
from batchlab.core.cost.profile import GridInfo, LoopTime, Profile
from batchlab.core.step_table import CONTENDED

DEFAULT_MODEL = "batchlab-small"
BLOCK_SIZE = 16


def calibrate(model: str = DEFAULT_MODEL, device: str = "cpu", threads: int | None = 1,
              out: str | Path | None = None, grid: Grid | None = None, *,
              block_size: int = BLOCK_SIZE, kv_memory: str | None = None, dtype: str = "float32",
              progress: bool = True, seed: int = 0, normalise: str = "auto",
              embed_measurements: bool = True, log: Callable[[str], None] | None = None,
              runtime: Runtime | None = None, on_contention: str | None = None,
              fast: FastPath | None = None) -> Profile:
    """Time `model` on `device` over `grid` (default_grid()), fit the cost model and
    return the profile; with `out`, save it there and keep raw timings in the JSONL
    next to it (a re-run with the same settings resumes from them).

    kv_memory: the KV budget whose block count the profile records (backend default:
    1GiB on CPU). runtime: an already loaded backend to time (its model, device, dtype
    and threads win over the arguments). on_contention: refuse (default:
    $BATCHLAB_ON_CONTENTION, else refuse) or keep a serving phase contended twice
    (calibration/sweep/contention.py); fast: the backend's fast path (None: the
    reference path). Raises ValueError (one line) for an unknown model or
    absent device, or an unknown on_contention."""
    grid = grid or default_grid()
    contention_mode = on_contention_mode(on_contention)
    say = log or (lambda msg: print(msg, file=sys.stderr))
    t_start = time.perf_counter()
    rt = runtime or Runtime(model, dtype=dtype, device=device, threads=threads,
                            kv_memory=kv_memory, seed=seed, fast=fast)
    rt.pool_blocks(None, block_size)  # a budget that holds no block fails now, not after the sweep
    meta = rt.meta()
    say(f"calibrate: {meta.model} ({params_label(rt.spec.params)} params, {meta.dtype}) on "
        f"{meta.device} ({meta.gpu or meta.cpu}, {meta.threads} thread(s)), "
        f"loaded in {rt.load_s:.1f} s")
    longest = max_context(widest_points(grid))
    if rt.spec.max_context is not None and longest > rt.spec.max_context:
        say(f"calibrate: warning: the grid builds sequences of up to {longest} tokens, beyond "
            f"{meta.model}'s context limit of {rt.spec.max_context}: the fit covers contexts "
            f"this model cannot serve")
    ident = {"model": meta.model, "device": meta.device, "threads": meta.threads,
             "dtype": meta.dtype, "matmul": meta.matmul, "block_size": block_size}
    if meta.fast_path:  # another path's timings are not resumed from; the reference's keys stay
        ident["fast_path"] = meta.fast_path
    path = measurements_path(out) if out else Path(tempfile.mkdtemp()) / "measurements.jsonl"

    roof = roofline_for(rt.device, rt.dtype)
    append_roofline(path, ident, roof)
    say(f"calibrate: roofline read {roof['read_bandwidth'] / 1e9:.1f} GB/s, copy "
        f"{roof['copy_bandwidth'] / 1e9:.1f} GB/s, matmul {roof['matmul_flops'] / 1e9:.0f} GFLOP/s")
    engine = rt.engine(blocks_needed(widest_points(grid), block_size), block_size)
    engine.warmup()
    sweep = Sweep(engine, grid, path, ident, ReferenceKernel(rt.device), seed)
    before = sum(r["round"] >= 0 for r in read_records(path, ident))
    if before:
        say(f"calibrate: resuming: {before} timings already in {path}")
    t_sweep = time.perf_counter()
    with tqdm(desc="calibrate", unit="step", file=sys.stderr, disable=not progress,
              dynamic_ncols=True, mininterval=0.5) as bar:
        def tick(n: int, total: int | None) -> None:
            if total is not None:
                bar.total = total
                bar.refresh()
            bar.update(n)
        added = sweep.run(tick)
    sweep_s = time.perf_counter() - t_sweep
    if before and not added:
        say(f"calibrate: every point already measured in {path}: re-fitting only "
            f"(delete that file to measure afresh)")
    if added:  # measured again after the sweep; the profile keeps the best of all
        append_roofline(path, ident, roofline_for(rt.device, rt.dtype))
    roof = read_roofline(path, ident)

    records = [r for r in read_records(path, ident) if r["round"] >= 0]
    ms, normalised = summarize(records, grid, normalise)
    result = fit(Shape.of(rt.spec), ms, 1.0 / roof["read_bandwidth"], spread=spread_pct(ms))
    # Both forms are fitted and kept; DEFAULT_FORM prices the profile (calibration/fit/both_forms.py).
    try:
        gpu, gpu_why = fit_cpu_form(rt.spec, ms, roof["read_bandwidth"], roof["matmul_flops"], spread_pct(ms)), ""
    except ValueError as e:  # too few points (a quick grid), or shapes it lacks (MoE, windows): the fitted form alone
        gpu, gpu_why = None, str(e)
    form = DEFAULT_FORM if gpu is not None else "fitted"
    m, other = (gpu.model, result.model) if form == "gpu" else (result.model, gpu and gpu.model)
    for cost in (m, other):  # both land in the profile: either non-physical is refused, not written
        if cost is not None:
            check_prices(cost, [StepFeatures(**x.features) for x in ms], "the sweep's fit")
    notes = (f"load average up to {roof.get('load_average', float('nan')):.2f} "
             f"({os.cpu_count()} CPUs) when the roofline was measured, before and after "
             f"the sweep; form {result.model.combine!r} (training mean APE by form: {result.train_mean_ape}); "
             f"drift normalisation: {normalised}; "
             f"{len(records)} timings ({grid.rounds}-{grid.max_rounds} rounds a point, "
             f"~{grid.target_s:g} s of timings each), {grid.warmup} warm-up per point")
    if result.model.combine == "sum":
        notes += "; weight read pinned to the measured read bandwidth (not separable from overhead)"
    notes += (f"; priced by the {form} form; " + (
        f"GPU form not fitted: {gpu_why}" if gpu is None else
        # the notes' wording is kept as stored profiles have it: its "old" names the fitted form
        f"GPU form fitted too (held-out median |error| {gpu.quality.heldout.median_ape}% against the old "
        f"form's {result.quality.heldout.median_ape}%"
        + (", mem_efficiency pinned to the measured read bandwidth" if gpu.pinned else "") + ")"))
    serving = loop = None
    if grid.serve_s > 0:  # steps as serving meets them: refine the sweep's fit to them
        say(f"calibrate: serving phase: ~{grid.serve_s:g} s of synthetic traffic on the backend")
        try:
            m, serving, loop, other = serve(rt, m, max_chunk(grid.points), grid.serve_s, seed,
                                            also=other)
        except ContendedCalibration as e:  # a neighbour's burst often passes: once more
            say(f"calibrate: {e}; serving again once")
            m, serving, loop, other = serve(rt, m, max_chunk(grid.points), grid.serve_s, seed + 1,
                                            also=other, strict=contention_mode == "refuse")
        if serving["contended_share"] > MAX_CONTENDED_SHARE:  # kept, as asked
            warning = (f"the serving phase was contended again: {serving['contended_share']:.0%} of its "
                       f"{serving['steps']} steps took over {CONTENDED:g}x the sweep's price; kept (on "
                       f"contention: keep), so the profile's serving level carries the contention")
            say(f"calibrate: warning: {warning}")
            notes += f"; WARNING: {warning}"
        if not serving["fresh_process"]:
            say("calibrate: warning: the serving phase ran in this process (a fresh one could not "
                "start), where the sweep warmed every prefill shape: its prefills are priced low")
        notes += (f"; refined on {serving['steps']} served steps (serving level against the "
                  f"sweep's: memory x{serving['scale']:.3f}, compute x{serving['compute_scale']:.3f}; "
                  f"fit quality above is the sweep's fit on the sweep's points)")
    old_m, gpu_m = (other, m) if form == "gpu" else (m, other)
    profile = Profile(
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        model=rt.spec, model_source=meta.model, device=device_info(meta),
        block_size=block_size, num_kv_blocks=rt.kv_blocks(block_size),
        cost=cost_params(old_m), fit=gpu.quality if gpu is not None and form == "gpu" else result.quality,
        effective=effective(old_m, roof), form=form,
        gpu_form=None if gpu is None else gpu_form_params(gpu).refined(gpu_m),
        grid=GridInfo(name=grid.name, points=len(grid.points), rounds=grid.rounds,
                      target_s=grid.target_s),
        drift_normalisation=normalised, sweep_s=round(sweep_s, 2),
        total_s=round(time.perf_counter() - t_start, 2),
        measurements=ms if embed_measurements else None,
        measurements_path=str(path) if out else None, notes=notes, serving=serving,
        loop=LoopTime.fitted(loop) if loop else None,
        runs=["calibration serving phase"] if serving else None)
    if out:
        profile.save(out)
    else:
        shutil.rmtree(path.parent, ignore_errors=True)  # our scratch directory
    return profile
