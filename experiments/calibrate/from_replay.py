"""`batchlab calibrate --from-replay`: the replays read, the prior they refine (a profile, or
the roofline of a preset on a hardware preset), the engine's settings, the fit
(calibration/from_replay/run.py) and what it prints. --endpoint (endpoint.py) ends here too."""
from __future__ import annotations

import argparse
import json

from batchlab.calibration.from_replay.judge import UNSTEADY_PCT
from batchlab.calibration.from_replay.prior import roofline_prior
from batchlab.calibration.from_replay.read import read_all
from batchlab.calibration.from_replay.run import from_replays
from batchlab.calibration.from_replay.settings import resolve, scrape
from batchlab.core.cost.profile import load_profile, ProfileError, shipped_profiles
from batchlab.core.model.hardware import HARDWARE
from batchlab.core.model.presets import MODELS
from batchlab.experiments.config import HardwareConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.output import profile_out_path, save_fitted_profile

SETTING_OPTIONS = ("max_num_seqs", "max_num_batched_tokens", "num_kv_blocks", "block_size", "prefix_caching")


def load_prior(args: argparse.Namespace, model: str | None):
    """(the prior profile, where from): --profile; else with --hardware the roofline of the
    preset model on it; else the model's shipped profile."""
    name = args.profile
    short = (model or "").rstrip("/").rsplit("/", 1)[-1]
    if name and args.hardware:
        raise UserError("give --profile or --hardware as the prior, not both")
    if args.hardware:
        return roofline_prior_for(short, args.hardware)
    if not name:
        name = next((s for s in shipped_profiles() if short and s.startswith(short + "-")), None)
        if name is None:
            raise UserError(f"no prior for model {model!r}: give --profile (a calibration of this model "
                            f"and device, or of a similar one), or --model PRESET --hardware NAME (the "
                            f"roofline) for the terms the timings cannot tell")
    try:
        return load_profile(name), str(name)
    except ProfileError as e:
        raise UserError(str(e)) from None


def roofline_prior_for(model: str, hardware: str):
    if model not in MODELS:
        raise UserError(f"model {model!r} is not a preset, so its shape is unknown: give --model PRESET "
                        f"(one of {', '.join(MODELS)}) or --profile")
    if hardware not in HARDWARE:
        raise UserError(f"--hardware {hardware!r}: expected one of {', '.join(HARDWARE)}")
    d = HardwareConfig()
    return (roofline_prior(MODELS[model], HARDWARE[hardware], d.mem_efficiency, d.compute_efficiency,
                           d.step_overhead_s), f"roofline of {model} on {hardware}")


def settings_for(args: argparse.Namespace, metrics_url: str | None, prior):
    given = {k: getattr(args, k, None) for k in SETTING_OPTIONS}
    given["policy"] = args.policy
    scraped, why = scrape(metrics_url) if metrics_url else ({}, "no server to ask")
    try:
        return resolve(given, scraped, prior.num_kv_blocks, prior.block_size), why
    except ValueError as e:
        raise UserError(str(e)) from None


def run_from_replay(args: argparse.Namespace) -> int:
    try:
        # With --hardware, --model names the preset whose shape prices the server's model.
        replays = read_all(args.from_replay, None if args.hardware else args.model)
    except ValueError as e:
        raise UserError(str(e)) from None
    prior, where = load_prior(args, args.model or replays[0].model)
    metrics = args.metrics or next((r.endpoint for r in replays if r.endpoint), None)
    settings, why = settings_for(args, metrics, prior)
    return fit_and_report(args, replays, prior, where, settings, why)


def fit_and_report(args, replays, prior, where: str, settings, why: str, held=None) -> int:
    if args.holdout_every < 0 or args.holdout_every == 1:
        raise UserError(f"--holdout-every must be 0 (none) or >= 2, got {args.holdout_every}")
    out = profile_out_path(args) if args.out else None
    try:
        res = from_replays(replays, prior, where, settings, args.holdout_every, held,
                           same_model=not args.hardware)
    except ValueError as e:
        raise UserError(str(e)) from None
    out = save_fitted_profile(args, out, res.profile, "replayed")
    f = res.fit
    if args.format == "json":
        print(json.dumps({"profile": str(out), "fitted_on": res.fitted_on, "judged_on": res.judged_on,
                          "settings": settings.as_dict(),
                          "dropped": {r.where: r.dropped for r in replays},
                          "terms": [t.__dict__ for t in f.terms], "held": f.held,
                          "together": f.together, "heldout": res.heldout and res.heldout.as_dict(),
                          "heldout_prior": res.heldout_prior and res.heldout_prior.as_dict(),
                          "train": res.train.as_dict(), "floor": res.floor and res.floor.as_dict(),
                          "heldout_by_replay": [{"replay": w, "fit": a.as_dict(), "prior": b.as_dict()}
                                                for w, a, b in res.per_replay],
                          "fit_s": f.seconds, "evaluations": f.nfev}, indent=1))
        return 0
    for r in replays:
        print(f"read {r.where} ({r.fmt}): {len(r.requests)} requests used; dropped: {r.describe_dropped()}")
    print(f"engine settings: {'; '.join(settings.lines())}" + (f"\n  ({why})" if why else ""))
    print(f"prior: {where}\nfitted on: {', '.join(res.fitted_on)}\njudged on: "
          f"{', '.join(res.judged_on) or 'none (--holdout-every 0)'}\n")
    print(f"{'term':<18} {'prior':>11} {'fitted':>11} {'x prior':>8} {'+-':>6}  told by the data?")
    for t in f.terms:
        told = {"told": "yes", "untold": "no: held at the prior", "weak": "weakly (see +-)",
                "together": f"only with {', '.join(t.partners) or 'others'}"}[t.status]
        print(f"{t.name:<18} {t.prior:>11.4g} {t.value:>11.4g} {t.value / t.prior:>8.3f} "
              f"{'x' + format(t.sd_factor, '.2f'):>6}  {told}")
    for a, b, c in f.together:
        print(f"  {a} and {b}: told only together (correlation {c:+.2f}); their split follows the prior")
    if f.held:
        print(f"  not fitted (the prior prices them at 0): {', '.join(f.held)}")
    print(f"\nfit: {f.residuals} timings, rms log error {f.rms:.3f}, {f.nfev} simulations of the "
          f"replays, scipy least_squares (trf, soft_l1)")
    print(f"train:   {res.train.line()}")
    if res.heldout:
        print(f"held out: {res.heldout.line()}\n  prior:  {res.heldout_prior.line()}")
    if len(res.per_replay) > 1:
        for name, fitted, before in res.per_replay:
            print(f"  {name}: {fitted.line()}\n    prior: {before.line()}")
    print(f"server's own spread: {res.floor.line() if res.floor else res.floor_from}")
    if res.floor and res.floor.unsteady:
        print(f"WARNING: the same requests sent twice differed by more than {UNSTEADY_PCT:.0f}%: the "
              f"server's speed moved during the replays, so the errors above measure that as much as "
              f"the fit; replay again on a quiet server")
    print(f"\nprofile written to {out}; use it with batchlab simulate --profile {out}")
    return 0

