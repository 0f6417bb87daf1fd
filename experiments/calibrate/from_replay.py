"""`batchlab calibrate --from-replay`: the replays read, the prior they refine (a profile, or
the roofline of a preset on a hardware preset), the engine's settings, the fit
(calibration/from_replay/run.py) and what it prints. --endpoint (endpoint.py) ends here too."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from batchlab.calibration.from_replay.prior import roofline_prior
from batchlab.calibration.from_replay.read import read_all
from batchlab.calibration.from_replay.report import replayed
from batchlab.calibration.from_replay.run import from_replays
from batchlab.calibration.from_replay.server_run import read_server_run
from batchlab.calibration.from_replay.settings import resolve, scrape
from batchlab.core.cost.profile import load_profile, ProfileError, shipped_profiles
from batchlab.core.model.hardware import HARDWARE
from batchlab.core.model.presets import MODELS
from batchlab.experiments.calibrate.probe_run import probe_folders
from batchlab.experiments.config import HardwareConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.progress import progress_bar
from batchlab.experiments.output import print_calibrated, profile_out_path, save_fitted_profile

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
    try:  # what the server states is range-checked as the options are: a one-line error
        scraped, why = scrape(metrics_url) if metrics_url else ({}, "no server to ask")
        return resolve(given, scraped, prior.num_kv_blocks, prior.block_size), why
    except ValueError as e:
        raise UserError(str(e)) from None


def run_from_replay(args: argparse.Namespace) -> int:
    paths, judged = probe_folders(args.from_replay)
    try:
        # With --hardware, --model names the preset whose shape prices the server's model.
        replays = read_all(paths, None if args.hardware else args.model)
    except ValueError as e:
        raise UserError(str(e)) from None
    prior, where = load_prior(args, args.model or replays[0].model)
    metrics = args.metrics or next((r.endpoint for r in replays if r.endpoint), None)
    settings, why = settings_for(args, metrics, prior)
    held = [r.where.split(" (")[0] in judged for r in replays] if judged else None  # probes: as --endpoint
    return fit_and_report(args, replays, prior, where, settings, why, held=held)


# Fitting this many requests or more takes minutes: a line every EVERY simulations, even
# where stderr is not a terminal (a terminal gets a bar whatever the size).
LONG_FIT = 10_000
EVERY = 10


@contextmanager
def fit_progress(n: int) -> Iterator[Callable[[], None]]:
    """A tick to call after each of the fit's simulations of the n requests."""
    if sys.stderr.isatty():
        with progress_bar(desc=f"fitting (simulations of {n:,} requests)", unit="sim") as bar:
            yield lambda: bar.update(1)
        return
    done = [0]

    def tick() -> None:
        done[0] += 1
        if n >= LONG_FIT and done[0] % EVERY == 0:
            print(f"fitting: {done[0]} simulations of {n:,} requests done", file=sys.stderr, flush=True)
    yield tick


def server_run(args: argparse.Namespace):
    """The --server-run folder's tables, or None where none was given."""
    if not getattr(args, "server_run", None):
        return None
    try:
        return read_server_run(args.server_run)
    except ValueError as e:
        raise UserError(f"--server-run {e}") from None


def fit_and_report(args, replays, prior, where: str, settings, why: str, held=None) -> int:
    if args.holdout_every < 0 or args.holdout_every == 1:
        raise UserError(f"--holdout-every must be 0 (none) or >= 2, got {args.holdout_every}")
    server = server_run(args)
    out = profile_out_path(args) if args.out else None
    n = sum(len(r.requests) for r in replays)
    try:
        with fit_progress(n) as tick:
            res = from_replays(replays, prior, where, settings, args.holdout_every, held,
                               same_model=not args.hardware, tick=tick, keep_fit=args.keep_fit, server=server)
    except ValueError as e:
        raise UserError(str(e)) from None
    out = save_fitted_profile(args, out, res.profile, "replayed")
    if args.format == "json":  # the table prints them with the report; JSON keeps stdout for JSON
        for line in res.verdict.warnings():
            print(line, file=sys.stderr)
    print_calibrated(args, replayed(res, where, why), out)
    return 0
