"""A GPU profile from a folder of Vidur-format operator tables (as ../shared/gpu-profiles/vidur):
read, fit, judge on held-out models and TP degrees, and say what rests on assumptions."""
from __future__ import annotations

import time
from datetime import datetime, UTC
from pathlib import Path
from typing import NamedTuple

from batchlab.calibration.operators.collectives import (allreduce_collectives, datasheet_collectives,
                                                        send_recv_fallback)
from batchlab.calibration.operators.fit import best_tile, fit_attention
from batchlab.calibration.operators.heldout import (LayerJudgment, heldout_attention, judge_attention, judge_layers,
                                                    judge_steps)
from batchlab.calibration.operators.tables import OperatorTableError, read_rows
from batchlab.calibration.operators.vidur import (VIDUR_GPUS, LayerTiming, is_gated, read_attention,
                                                  read_collective, read_mlp)
from batchlab.core.cost.gpu_profile import Collectives, ErrorStats, FittedOn, GpuProfile, HeldOut, Param
from batchlab.core.model.hardware import HARDWARE, HardwareSpec
from batchlab.core.model.hardware import ALLREDUCE_LATENCY_S

SOURCE = ("Vidur profiling data (microsoft/vidur @ 7d47513 compute, network; @ e2d00e9 attention: "
          "data/profiling/), MIT licence")
# Not in operator tables: the engine's own loop (scheduling, input preparation, sampling,
# detokenising). Assumed, with the range serving engines show; sensitivity varies them.
ASSUMED = {"step_s": (1.0e-3, 0.3e-3, 3.0e-3), "seq_s": (10e-6, 2e-6, 40e-6)}
ASSUMED_WHY = "assumed: operator tables do not time the engine's loop"
TILE_WHY = ("chosen among 64 and 128 rows by the fit's error on all shapes: GEMMs past 128 rows "
            "compute whole tiles (Vidur's timings step past multiples of the tile)")
EAGER = ("operators timed one at a time in eager mode: no CUDA graphs, no overlap between operators; "
         "the engine version Vidur profiled, not today's kernels")


class Built(NamedTuple):
    profile: GpuProfile
    judgment: LayerJudgment
    steps: dict[str, ErrorStats]  # whole steps held out (judge_steps), where attention was timed
    skipped: list[str]  # tables left out, and why
    fit_s: float  # the one fit shipped
    judge_s: float  # the held-out fits


def _vidur_name(gpu: str) -> str:
    if gpu not in HARDWARE:
        raise OperatorTableError(f"unknown GPU {gpu!r} (--gpu): expected a hardware preset with "
                                 f"operator tables, one of {', '.join(VIDUR_GPUS)}")
    if gpu not in VIDUR_GPUS:
        raise OperatorTableError(f"GPU {gpu!r} has no Vidur operator tables (measured: "
                                 f"{', '.join(VIDUR_GPUS)}); it is priced from the nearest measured "
                                 f"GPU by datasheet ratios (experiments/setup)")
    return VIDUR_GPUS[gpu]


def read_layers(root: Path, vidur: str) -> tuple[list[LayerTiming], list[str]]:
    folder = root / "compute" / vidur
    files = sorted(folder.glob("*/*/mlp.csv"))
    if not files:
        raise OperatorTableError(f"{folder}: no ORG/MODEL/mlp.csv operator tables (Vidur's "
                                 f"data/profiling/compute layout)")
    rows, skipped = [], []
    for f in files:
        if not read_rows(f, (), "Vidur mlp.csv"):
            skipped.append(f"{f.relative_to(root)}: no rows (a header only): nothing timed")
            continue
        if not is_gated(f):
            skipped.append(f"{f.relative_to(root)}: not a gated (SwiGLU) MLP, not the form's layer")
            continue
        rows += read_mlp(f, f.parent.name)
    if not rows:
        raise OperatorTableError(f"{folder}: no table of a Llama-family (gated MLP) layer")
    return rows, skipped


def _collectives(root: Path, vidur: str, hw: HardwareSpec) -> tuple[Collectives, ErrorStats | None, str]:
    for kind in ("dgx", "pairwise_nvlink"):
        path = root / "network" / f"{vidur}_{kind}" / "all_reduce.csv"
        if path.is_file():
            fit = allreduce_collectives(kind, read_collective(path, "all_reduce"))
            return fit.collectives, fit.error, f"all-reduce measured ({path.relative_to(root)})"
    for kind in ("dgx", "pairwise_nvlink"):
        path = root / "network" / f"{vidur}_{kind}" / "send_recv.csv"
        if path.is_file():
            return (send_recv_fallback(kind, read_collective(path, "send_recv")), None,
                    f"all-reduce not measured on this GPU: a ring priced from send/recv ({path.relative_to(root)})")
    return (datasheet_collectives(hw.interconnect or "none", hw.interconnect_bandwidth or 1e9,
                                  hw.allreduce_latency_s or ALLREDUCE_LATENCY_S), None,
            "no collective measured on this GPU: datasheet interconnect and assumed latency")


def _attention(root: Path, vidur: str, hw: HardwareSpec):
    """(fitted constants, this GPU's own attention rows ([] where the constants come from
    another GPU's table, or from none), where they come from): this GPU's attention table,
    else the first measured GPU's, as fractions of its datasheet figures."""
    own = root / "attention" / vidur / "attention.csv"
    tables = [own] + sorted(p for p in (root / "attention").glob("*/attention.csv") if p != own)
    for path in tables:
        if not path.is_file():
            continue
        other = next((g for g, v in VIDUR_GPUS.items() if v == path.parent.name), None)
        on = hw if path == own else HARDWARE.get(other or "")
        if on is None:
            continue
        rows = read_attention(path)
        fitted = fit_attention(rows, on.mem_bandwidth, on.flops_for("bf16"))
        if path == own:
            return fitted, rows, f"fitted on {path.relative_to(root)}"
        return fitted, [], (f"fitted on {on.name} ({path.relative_to(root)}) and assumed to reach the "
                            f"same fractions of this GPU's datasheet bandwidth and 16-bit peak, with the "
                            f"same fixed costs (no attention table for this GPU)")
    return None, [], "no attention table: assumed"


def build_profile(root: Path, gpu: str, judge: bool = True) -> Built:
    vidur = _vidur_name(gpu)
    hw = HARDWARE[gpu]
    rows, skipped = read_layers(root, vidur)
    peak = hw.flops_for("bf16")
    t0 = time.perf_counter()
    tile, layers = best_tile(rows, hw.mem_bandwidth, peak)
    attn, own_attention, attn_where = _attention(root, vidur, hw)
    fit_s = time.perf_counter() - t0
    judgment = judge_layers(rows, hw.mem_bandwidth, peak, tile) if judge else None
    # attention is judged on its own GPU only: another's is taken as it is
    attn_priced = heldout_attention(own_attention, hw.mem_bandwidth, peak) if judge and own_attention else []
    attn_judged = judge_attention(attn_priced) if judge and own_attention else {}
    steps = judge_steps(rows, attn_priced, hw.mem_bandwidth, peak, tile) if judge else {}
    judge_s = time.perf_counter() - t0 - fit_s
    collectives, ar_error, ar_where = _collectives(root, vidur, hw)
    params = {n: Param(value=v, stderr=layers.stderr[n], source="fitted") for n, v in layers.values.items()}
    if attn is None:  # no attention timed anywhere: the roofline's view
        for n, v in {"attn_layer_s": 5e-6, "attn_seq_s": 0.2e-6, "attn_kv_efficiency": 0.8,
                     "attn_pair_efficiency": 0.6, "attn_self_pair_cost": 1.0}.items():
            params[n] = Param(value=v, source="assumed: no attention table", low=v / 2, high=v * 2)
        params["attn_prefill_token_s"] = Param(value=0.0, source="assumed: no attention table")
    else:
        src = "fitted" if own_attention else "fitted on another GPU, same datasheet fractions"
        for n, v in attn.values.items():
            se = attn.stderr[n]
            params[n] = Param(value=v, stderr=se, source=src) if own_attention else Param(
                value=v, stderr=se, source=src, low=v * 0.7, high=v * 1.3)
    for n, (v, lo, hi) in ASSUMED.items():
        params[n] = Param(value=v, source=ASSUMED_WHY, low=lo, high=hi)
    params["gemm_tile_tokens"] = Param(value=tile, source=TILE_WHY, low=tile / 2, high=tile * 2)
    spread = max(ar_error.p90, 0.1) if ar_error else 0.5
    params["allreduce_scale"] = Param(value=1.0, source=f"{ar_where}; range: the table's p90 error"
                                      if ar_error else ar_where, low=1 - spread / 2, high=1 + spread)
    empty = ErrorStats(n=0, median=0, p90=0, share_high=0)
    if judgment is None:
        heldout = HeldOut(scheme="not judged", overall=empty, by_region={}, by_tp={})
    elif judgment.fits == 0:  # never "0.0% over 0 shapes": say why nothing was held out
        models, tps = sorted({r.label for r in rows}), sorted({r.tp for r in rows})
        heldout = HeldOut(scheme=f"not judged: each (model, TP degree) is priced by a fit on the other "
                          f"models at the other TP degrees, which needs tables of 3 models and 2 TP "
                          f"degrees at least (found {len(models)} model(s), TP {', '.join(map(str, tps))})",
                          overall=empty, by_region={}, by_tp={}, attention=attn_judged,
                          allreduce=ar_error)
    else:
        heldout = HeldOut(scheme=judgment.scheme, overall=judgment.overall, by_region=judgment.by_region,
                          by_tp=judgment.by_tp, attention=attn_judged, allreduce=ar_error)
    (_, step_lo, step_hi), (_, seq_lo, seq_hi) = ASSUMED["step_s"], ASSUMED["seq_s"]
    ranges = f"ranges {step_lo * 1e3:g}-{step_hi * 1e3:g} ms, {seq_lo * 1e6:g}-{seq_hi * 1e6:g} us"
    assumptions = [f"attention: {attn_where}", f"collectives: {ar_where}",
                   f"step_s, seq_s: {ASSUMED_WHY} ({ranges})", EAGER]
    profile = GpuProfile(
        gpu=gpu, source=SOURCE, created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        params=params, collectives=collectives,
        fitted_on=FittedOn(models=sorted({r.label for r in rows}), tensor_parallel=sorted({r.tp for r in rows}),
                           shapes=len(rows), attention=attn_where),
        heldout=heldout, assumptions=assumptions, fit_s=round(fit_s + judge_s, 2))
    return Built(profile, judgment, steps, skipped, fit_s, judge_s)
