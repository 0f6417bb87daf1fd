"""`calibrate --from-run`: fit or refine a profile from served runs' step tables, and
judge it on runs it was not fitted on.

With a profile, its sweep-fitted structure is kept and refined to serving
(calibration/fit/served_steps.py refine); without one, every term is fitted from the served
steps (the model must be a preset, for its shape). Runs held out of the fit: one in
`holdout_every` (the 2nd, 5th, ... given), or with a single run the last HOLDOUT_SHARE
of its steps. Every problem is a ValueError of one line naming the directory."""
from __future__ import annotations

import datetime
from dataclasses import dataclass, field

import numpy as np

from batchlab.calibration.fit.fitted_form import fit
from batchlab.calibration.fit.profile_parts import cost_params, device_info, effective
from batchlab.calibration.fit.served_steps import Levels, judge_kinds, missing_kinds, predict, refine
from batchlab.calibration.served.runs import ServedRun, check_same, read_runs
from batchlab.core.cost.fitted import FittedCostModel, Shape
from batchlab.core.cost.loop_time import fit_gaps, table_gaps
from batchlab.core.cost.profile import FitQuality, LoopTime, Measurement, Profile, RegionError
from batchlab.core.model.presets import MODELS
from batchlab.core.step_table import step_features

HOLDOUT_SHARE = 0.25


@dataclass
class FromRunResult:
    profile: Profile
    fitted_on: list[str]
    judged_on: list[str]
    scale: Levels | None  # serving level against the profile's (refine only)
    after: dict[str, dict]  # per step kind, on the held-out steps: the fitted profile
    before: dict[str, dict] | None = None  # the same for the given profile
    train: dict[str, dict] = field(default_factory=dict)


def check_profile(runs: list[ServedRun], profile: Profile, where: str) -> None:
    """Runs of the profile's own model, device, thread count and dtype."""
    for r in runs:
        wrong = [model_mismatch(r, profile, where), *setting_mismatches(r, profile, where)]
        if any(wrong):
            raise ValueError(next(w for w in wrong if w))


def model_mismatch(r: ServedRun, profile: Profile, where: str) -> str | None:
    """The one-line error where run `r` served another model than the profile's."""
    model = r.meta.model
    if model in (profile.model.name, profile.model_source):
        return None
    return (f"{r.where}: model {model!r}, but profile {where} is of "
            f"{profile.model_source or profile.model.name!r}")


def setting_mismatches(r: ServedRun, profile: Profile, where: str) -> list[str]:
    """How run `r` was served otherwise than the profile measured: device, threads, dtype."""
    m, dev = r.meta, profile.device
    missing = [k for k in ("device", "threads", "dtype") if not m.recorded(k)]
    if missing:
        return [f"{r.where}: meta.json records no {', '.join(missing)}; expected what batchlab run wrote"]
    out = []
    if str(m.device).split(":")[0] != dev.kind:
        out.append(f"{r.where}: device {m.device!r}, but profile {where} was measured on {dev.kind}")
    elif dev.kind == "cpu" and m.threads != dev.threads:
        out.append(f"{r.where}: {m.threads} thread(s), but profile {where} was measured with {dev.threads}")
    if m.dtype != dev.dtype:
        out.append(f"{r.where}: dtype {m.dtype}, but profile {where} is {dev.dtype}")
    return out


def _select(steps: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[mask] for k, v in steps.items()}


def _concat(tables: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    keys = set.intersection(*(set(t) for t in tables))
    return {k: np.concatenate([t[k] for t in tables]) for k in keys}


def split(runs: list[ServedRun], holdout_every: int) -> tuple[list, list, list[str], list[str]]:
    """(train tables, held-out tables, names fitted on, names judged on)."""
    if len(runs) == 1:
        r = runs[0]
        n = len(r)
        cut = n - max(1, int(round(n * HOLDOUT_SHARE))) if holdout_every and n > 1 else n
        idx = np.arange(n)
        held = [_select(r.steps, idx >= cut)] if cut < n else []
        return [_select(r.steps, idx < cut)], held, [f"{r.where} (first {cut} steps)"], \
            [f"{r.where} (last {n - cut} steps)"] if held else []
    is_held = [bool(holdout_every) and i % holdout_every == 1 for i in range(len(runs))]
    train = [r for r, h in zip(runs, is_held) if not h]
    held = [r for r, h in zip(runs, is_held) if h]
    return ([r.steps for r in train], [r.steps for r in held],
            [r.where for r in train], [r.where for r in held])


def _scratch(runs: list[ServedRun], train: dict[str, np.ndarray]) -> FittedCostModel:
    name = runs[0].meta.model
    spec = MODELS.get(name)
    if spec is None:
        raise ValueError(f"{runs[0].where}: model {name!r} is not a preset; give --profile (a "
                         f"calibration of it) so its shape is known")
    feats = step_features(train)
    ms = [Measurement(point=f"step{i}", region=_region(f), features=f._asdict(),
                      median_s=float(t), mad_s=0.0, reps=1)
          for i, (f, t) in enumerate(zip(feats, train["duration_s"]))]
    # Relative-error least squares leans fast on steps timed once (a step run 3x slow
    # pulls less than one predicted 3x slow): re-level it in log ratio (refine).
    return refine(fit(Shape.of(spec), ms).model, feats, train["duration_s"])[0]


def _region(f) -> str:
    if f.prefill_tokens and f.decode_tokens:
        return "mixed"
    return "prefill" if f.prefill_tokens else "decode"


def _quality(train: dict, held: dict | None) -> FitQuality:
    """Held-out figures only from held-out steps: with none (--holdout-every 0), n = 0
    and no error, never the training error under the held-out name."""
    def region(e: dict | None) -> RegionError:
        if e is None:
            return RegionError(n=0, median_ape=None, max_ape=None)
        return RegionError(n=e["n"], median_ape=e["median_ape"], max_ape=None)
    return FitQuality(heldout=region(held["all"] if held else None), train=region(train["all"]),
                      regions={k: region(held[k] if held else None) for k in ("decode", "prefill", "mixed")})


def check_distinct(runs: list[ServedRun]) -> None:
    """No run given twice (the same folder, or a copy: the same step table): a held-out
    copy of a training run would report training error as held-out."""
    seen: dict[tuple, ServedRun] = {}
    for r in runs:
        t = r.steps
        key = (len(r), t["start_s"].tobytes(), t["duration_s"].tobytes())
        if key in seen:
            raise ValueError(f"{r.where}: the same run as {seen[key].where} (the same step table); "
                             f"give each run once: a copy held out would judge the fit on its "
                             f"own training steps")
        seen[key] = r


def from_runs(dirs: list[str], profile: Profile | None = None, profile_where: str = "",
              holdout_every: int = 3) -> FromRunResult:
    runs = [r for d in dirs for r in read_runs(d)]
    check_same(runs)
    check_distinct(runs)
    if profile is not None:
        check_profile(runs, profile, profile_where)
    train_t, held_t, fitted_on, judged_on = split(runs, holdout_every)
    train = _concat(train_t)
    feats, y = step_features(train), train["duration_s"]
    positive = y > 0
    need = ("prefill", "after_prefill", "after_idle") + (() if profile else ("decode",))
    missing = missing_kinds([f for f, ok in zip(feats, positive) if ok], need)
    if missing:
        raise ValueError(f"{', '.join(fitted_on)}: too few steps to fit the cost terms: "
                         f"{', '.join(missing)} (at least 5 each); serve more or other traffic")
    feats = [f for f, ok in zip(feats, positive) if ok]
    train = _select(train, positive)
    scale = gpu_form = gpu = None
    if profile is not None:
        # both forms the profile carries are refined alike; its own form is judged
        model, scale = refine(profile.fitted_cost_model(), feats, train["duration_s"])
        if profile.gpu_form is not None:
            gpu, gpu_scale = refine(profile.gpu_form.model(profile.model), feats, train["duration_s"])
            gpu_form = profile.gpu_form.refined(gpu)
            if profile.form == "gpu":
                scale = gpu_scale
    else:
        model = _scratch(runs, train)
    form = profile.form if gpu_form is not None and profile is not None else "fitted"
    priced = gpu if form == "gpu" else model
    held = _concat(held_t) if held_t else None
    after = judge_kinds(held, predict(priced, step_features(held))) if held else {}
    before = (judge_kinds(held, predict(profile.cost_model(), step_features(held)))
              if held and profile is not None else None)
    train_j = judge_kinds(train, predict(priced, feats))
    meta = runs[0].meta
    base = profile
    gaps = [table_gaps(t) for t in train_t]
    loop = fit_gaps(np.concatenate([g for g, _ in gaps]), np.concatenate([n for _, n in gaps]))
    new = Profile(
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        model=base.model if base else MODELS[meta.model],
        model_source=base.model_source if base else meta.model,
        device=base.device if base else device_info(meta),
        block_size=base.block_size if base else (16 if meta.block_size is None else meta.block_size),
        num_kv_blocks=base.num_kv_blocks if base else (1 if meta.num_kv_blocks is None else meta.num_kv_blocks),
        cost=cost_params(model), fit=_quality(train_j, after or None),
        effective=effective(model, _roof(base) if base else {}),
        gpu_form=gpu_form, form=form,
        grid=base.grid if base else None, drift_normalisation=base.drift_normalisation if base else "none",
        measurements=base.measurements if base else None, runs=fitted_on,
        loop=LoopTime.fitted(loop) or (base.loop if base else None),
        notes=(f"fitted on served runs ({len(feats)} steps: {', '.join(fitted_on)}); judged on "
               f"{', '.join(judged_on) or 'none'}; " + (f"refined from {profile_where} (serving level "
               f"{scale})" if base else "every term fitted from the served steps")))
    return FromRunResult(new, fitted_on, judged_on, scale, after, before, train_j)


def _roof(p: Profile) -> dict[str, float]:
    e = p.effective
    return {k: v for k, v in (("read_bandwidth", e.measured_read_bandwidth),
                              ("copy_bandwidth", e.measured_copy_bandwidth),
                              ("matmul_flops", e.measured_matmul_flops)) if v}
