"""Both CPU cost forms on one sweep's measurements: the fitted form (core/cost/fitted.py,
fitted_form.py) in `cost` and the GPU form with the CPU extras (core/cost/cpu_form.py,
gpu_form.py) in `gpu_form`; `form` ("fitted" or "gpu") says which prices the profile.

DEFAULT_FORM is what `batchlab calibrate` writes; it was chosen by measurement
(docs/results/2026-12-02-cpu-gpu-form.md): the GPU form's held-out step error and
validate's TTFT/TPOT errors against the fitted form's on the shipped tiny profile's sweep."""
from __future__ import annotations

from batchlab.calibration.fit.fitted_form import fit
from batchlab.calibration.fit.gpu_form import CpuFormFit, fit_cpu_form
from batchlab.calibration.fit.profile_parts import cost_params, effective
from batchlab.core.cost.cpu_form_params import GpuFormParams
from batchlab.core.cost.fitted import Shape
from batchlab.core.cost.profile import Profile, PROFILE_VERSION

DEFAULT_FORM = "gpu"


def gpu_form_params(f: CpuFormFit) -> GpuFormParams:
    return GpuFormParams.of(f.model, f.stderr, f.pinned, round(f.rms_log, 5))


def refit(profile: Profile, form: str) -> Profile:
    """`profile` with both forms fitted afresh on its embedded sweep measurements (served
    refinements, where it had any, are not redone: both forms are the sweep's), priced by
    `form`. ValueError (one line) where it has no measurements or no measured roofline."""
    e, ms = profile.effective, profile.measurements or []
    if not ms:
        raise ValueError(f"{profile.describe()}: no embedded measurements to refit on")
    if not (e.measured_read_bandwidth and e.measured_matmul_flops):
        raise ValueError(f"{profile.describe()}: effective.measured_read_bandwidth / measured_matmul_flops "
                         f"missing: the GPU form's figures are what calibration measured")
    spread = profile.fit.spread_median_pct
    old = fit(Shape.of(profile.model), ms, 1.0 / e.measured_read_bandwidth, spread=spread)
    new = fit_cpu_form(profile.model, ms, e.measured_read_bandwidth, e.measured_matmul_flops, spread)
    roof = {"read_bandwidth": e.measured_read_bandwidth, "matmul_flops": e.measured_matmul_flops,
            **({"copy_bandwidth": e.measured_copy_bandwidth} if e.measured_copy_bandwidth else {})}
    chosen = new.quality if form == "gpu" else old.quality
    note = (f"refitted in both forms on its {len(ms)} sweep measurements (served refinements not redone); "
            f"priced by the {form} form; held-out median |error| fitted {old.quality.heldout.median_ape}%, "
            f"gpu {new.quality.heldout.median_ape}%")
    return profile.model_copy(update={
        "version": PROFILE_VERSION, "cost": cost_params(old.model), "effective": effective(old.model, roof),
        "fit": chosen, "gpu_form": gpu_form_params(new), "form": form, "serving": None, "runs": None,
        "notes": f"{note}; before: {profile.notes}"})
