"""A GPU profile refined on batchlab's own steps: `batchlab calibrate --device cuda` times
whole forward steps of the torch backend on a GPU (a batchlab profile's embedded
measurements); the GPU form's efficiencies, attention rates and engine-loop costs are
refitted on them, the rest kept from the GPU's public-data profile, and the profile is
judged on the grid points the calibration held out."""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
from scipy.optimize import least_squares

from batchlab.calibration.operators.collectives import error_stats
from batchlab.calibration.operators.fit import _stderr
from batchlab.calibration.operators.tables import OperatorTableError
from batchlab.core.features import StepFeatures, recorded_features
from batchlab.core.cost.gpu_profile import FittedOn, GpuProfile, HeldOut, Param
from batchlab.core.cost.profile import load_profile, Profile, ProfileError
from batchlab.core.model.hardware import HARDWARE

# What whole steps can tell apart; the per-kernel constants stay the operator tables'.
REFIT = ("mem_efficiency", "compute_efficiency", "attn_kv_efficiency", "attn_pair_efficiency",
         "step_s", "seq_s")


class Refined(NamedTuple):
    profile: GpuProfile
    fitted_steps: int
    judged_steps: int
    at_bound: tuple[str, ...] = ()  # constants the steps pushed to a bound: not resolved by them


def _bounds(x0: list[float]) -> tuple[list[float], list[float]]:
    """Each constant within 1e3 of its public-data value either way; an efficiency at most
    the datasheet (1): host-bound steps, whose time no kernel rate explains, would
    otherwise fit a GPU 100 times faster than its datasheet."""
    upper = [min(v * 1e3, 1.0) if n.endswith("_efficiency") else v * 1e3 for n, v in zip(REFIT, x0)]
    return [v * 1e-3 for v in x0], upper


def _steps(measured: Profile, heldout: bool) -> list[tuple[str, StepFeatures, float]]:
    return [(m.region, recorded_features(m.features), m.median_s)
            for m in measured.measurements or [] if m.heldout == heldout]


def refine_on_steps(path: Path, base: GpuProfile) -> Refined:
    """base (the GPU's public-data profile) refitted on the steps of the batchlab profile at path."""
    try:
        measured = load_profile(path)
    except ProfileError as e:
        raise OperatorTableError(str(e)) from None
    if measured.device.kind != "cuda":
        raise OperatorTableError(f"{path}: device.kind {measured.device.kind!r}: a GPU profile is refined "
                                 f"on steps timed on a GPU (batchlab calibrate --device cuda)")
    if measured.model.dtype_bytes > 2:
        raise OperatorTableError(f"{path}: model.dtype_bytes {measured.model.dtype_bytes}: the GPU form prices "
                                 f"16- or 8-bit weights (calibrate with --dtype bfloat16)")
    train, judged = _steps(measured, False), _steps(measured, True)
    if len(train) < 2 * len(REFIT):
        raise OperatorTableError(f"{path}: measurements: {len(train)} fitted steps; the refit needs "
                                 f"{2 * len(REFIT)} or more (calibrate with --grid default)")
    hw = HARDWARE[base.gpu]
    t = np.log([s for _, _, s in train])

    def priced(x, steps):
        cost = base.with_values(dict(zip(REFIT, x))).cost(measured.model, 1, hw)
        return np.array([cost.step_time(f) for _, f, _ in steps])

    x0 = [base.params[n].value for n in REFIT]
    lower, upper = _bounds(x0)
    res = least_squares(lambda x: np.log(priced(x, train)) - t, x0, x_scale=np.array(x0),
                        bounds=(lower, upper))
    at_bound = tuple(n for n, v, lo, hi in zip(REFIT, res.x, lower, upper)
                     if v >= hi * (1 - 1e-6) or v <= lo * (1 + 1e-6))
    se = _stderr(res, len(res.fun))
    where = f"batchlab calibrate --device cuda steps ({path.name}: {measured.describe()})"
    params = dict(base.params)
    for n, v, s in zip(REFIT, res.x, se):
        params[n] = Param(value=float(v), stderr=float(s), source=f"refitted on {where}")
    profile = base.model_copy(update={"params": params})
    errs = [(r, p / s - 1) for (r, _, s), p in zip(judged, priced(res.x, judged))] if judged else []
    regions = sorted({r for r, _ in errs})
    heldout = HeldOut(scheme=f"{len(judged)} grid points batchlab's calibration held out of the refit",
                      overall=error_stats([e for _, e in errs]),
                      by_region={r: error_stats([e for q, e in errs if q == r]) for r in regions},
                      by_tp={"1": error_stats([e for _, e in errs])})
    refit_note = f"refitted on {where}: {', '.join(REFIT)}; the other constants from the public-data profile"
    profile = profile.model_copy(update={
        "heldout": heldout, "source": f"{where}; on {base.source}",
        "fitted_on": FittedOn(models=[measured.model.name], tensor_parallel=[1], shapes=len(train),
                              attention=f"refitted on {where}"),
        "assumptions": [refit_note, *base.assumptions]})
    return Refined(profile, len(train), len(judged), at_bound)
