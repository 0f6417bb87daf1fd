"""Where the validated cost model comes from: a calibration profile given with --profile
(or the config's [profile]), or, with none, a fresh calibration of the model about to
run, on this machine, with the same thread count. The profile must describe the model
the backend serves; a different thread count or device is allowed with a warning
(the step times it predicts were measured elsewhere)."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

from batchlab.core.cost.profile import ProfileError, load_profile, shipped_profiles
from batchlab.core.cpu_name import cpu_name
from batchlab.experiments.errors import UserError, warn
from batchlab.experiments.validation.records import ProfileInfo


def _shape(spec) -> dict:
    return spec.model_dump(exclude={"name"})


def check_model(profile, spec, name: str) -> None:
    """UserError if the profile was calibrated for another model shape than `spec`."""
    if _shape(profile.model) != _shape(spec):
        raise UserError(f"profile {profile.describe()} was calibrated for a different model than "
                        f"{name} (shapes differ); calibrate this one "
                        f"(batchlab calibrate --model {name}) or omit --profile")


def check_profile(profile, runtime, cpu: bool = True) -> list[str]:
    """UserError if the profile is for another model; warnings for other conditions (cpu:
    also when it was measured on another CPU model)."""
    check_model(profile, runtime.spec, runtime.model.name)
    smoke = profile.smoke_test_warning()  # a --grid quick profile
    warnings = [smoke] if smoke else []
    d = profile.device
    if d.kind != runtime.device.type:
        warnings.append(f"profile measured on {d.kind}, the real run is on {runtime.device.type}")
    if d.kind == "cpu" and d.threads is not None and d.threads != runtime.threads:
        warnings.append(f"profile measured with {d.threads} thread(s), the real run uses {runtime.threads}")
    if d.dtype and d.dtype != str(runtime.dtype).removeprefix("torch."):
        warnings.append(f"profile measured in {d.dtype}, the real run is {runtime.dtype}")
    if cpu and other_cpu(profile, runtime):
        warnings.append(other_cpu(profile, runtime))
    return warnings


def other_cpu(profile, runtime) -> str:
    """'' if the profile was measured on this run's CPU model (or not on a CPU), else
    the line that says which two they are."""
    d = profile.device
    if d.kind != "cpu" or runtime.device.type != "cpu":
        return ""
    here = cpu_name()
    return "" if d.name == here else f"profile measured on {d.name}, the real run is on {here}"


def shipped_match(runtime):
    """(profile, name) of the first shipped profile that describes this run exactly: the
    same model shape, device kind, thread count and dtype, measured on a fit-for-use grid;
    (None, "") if none does. `batchlab run` without --profile measures the machine's speed
    against it."""
    for name in shipped_profiles():
        try:
            profile = load_profile(name)
        except ProfileError:
            continue
        # Another CPU model of the same setup still matches: its speed factor says so.
        if _shape(profile.model) == _shape(runtime.spec) and not check_profile(profile, runtime, cpu=False):
            return profile, name
    return None, ""


def speed_pricing(profile, path: str | None, runtime) -> tuple[object, str]:
    """(cost model, its description) that prices a real run's steady decode steps to
    measure the machine's speed (experiments/machine_speed.py): the given profile (warning where
    it was measured in other conditions), else a shipped profile of this exact setup,
    else (None, "")."""
    if profile is not None:
        for w in check_profile(profile, runtime):  # another model: an error
            warn(f"{path}: {w}")
        return profile.cost_model(), profile.describe()
    shipped, name = shipped_match(runtime)
    if shipped is None:
        return None, ""
    other = other_cpu(shipped, runtime)
    note = (f" ({other}: the factor is this machine's speed against that one's, the CPU models' "
            f"difference included)") if other else ""
    return shipped.cost_model(), f"shipped {name}: {shipped.describe()}{note}"


@contextmanager
def probe_around(device, needed: bool):
    """Yields None, or (needed: no profile prices the run) {"before": reference_probe}
    that gains "after" once the block ends: the probe around a run, outside its clock."""
    probe = {"before": reference_probe(device)} if needed else None
    yield probe
    if probe is not None:
        probe["after"] = reference_probe(device)


def reference_probe(device) -> dict[str, float]:
    """The roofline probe of calibration (a 64 MiB read, a copy, a 512^3 matmul; ~0.1 s),
    timed outside a run: the machine's speed where no profile prices the setup."""
    from batchlab.calibration.sweep.timing import measure_roofline  # lazy: torch, only around a real run
    return {k: (round(v, 3) if k == "load_average" else round(v, -6))
            for k, v in measure_roofline(device, mib=64, matmul_n=512).items()}


def load(path: str):
    try:
        return load_profile(path)
    except ProfileError as e:
        raise UserError(str(e)) from None


# The grid a calibration made for a run times (None: calibrate's default grid).
CALIBRATION_GRID = None


def calibrate_here(runtime, out_dir: Path | None):
    """Calibrate the run's model on this machine (minutes), saving the profile in out_dir.
    In a spawned process where one can start: a process that has run the sweep serves
    slower afterwards (measured on CPU: steady decodes +9%), so the real runs that follow
    are served as `batchlab run` serves them, in a process that has not."""
    try:
        from batchlab.calibration import calibrate  # lazy: torch, scipy; only to calibrate here
        from batchlab.calibration.sweep.fresh_process import run_fresh  # lazy: as above
    except ImportError as e:
        raise UserError(f"no --profile given and calibration is unavailable ({e}); "
                        f"pass --profile FILE") from None
    out = str(out_dir / "profile.json") if out_dir else None
    warn(f"no --profile: calibrating {runtime.model.name} on {runtime.device} with "
         f"{runtime.threads} thread(s) first (minutes)" + (f"; saved as {out}" if out else ""))
    args = (runtime.model.name, str(runtime.device))
    kw = dict(threads=runtime.threads, out=out, grid=CALIBRATION_GRID,
              dtype=str(runtime.dtype).removeprefix("torch."), progress=sys.stderr.isatty())
    profile = run_fresh(calibrate, *args, **kw)
    if profile is None:
        warn("calibrating in this process (no fresh one could start): its real runs may serve "
             "slower than `batchlab run` would")
        profile = calibrate(*args, **kw)
    return profile


def resolve(path: str | None, runtime, out_dir: Path | None) -> tuple[object, ProfileInfo]:
    """(profile, description for the report)."""
    profile = load(path) if path else calibrate_here(runtime, out_dir)
    warnings = check_profile(profile, runtime)
    for w in warnings:
        warn(f"{path or 'profile'}: {w}")
    return profile, describe(path, profile).model_copy(update={"warnings": warnings})


def describe(path: str | None, profile) -> ProfileInfo:
    """Where a profile came from, for a report."""
    return ProfileInfo(source=path or "calibrated for this run", describe=profile.describe(),
                       created=profile.created, heldout_median_ape_pct=profile.fit.heldout.median_ape)
