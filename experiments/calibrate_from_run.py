"""`batchlab calibrate --from-run DIR [DIR ...]`: fit (or, with --profile, refine) the
cost model on served runs' step tables and print its error per step kind on the runs
it was not fitted on (calibration/from_run.py)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from batchlab.core.profile import ProfileError, load_profile
from batchlab.experiments.output import profile_out_path
from batchlab.experiments.errors import UserError

KINDS = ("all", "decode", "prefill", "small_chunk", "mixed", "after_prefill", "after_idle")


def _cell(e: dict | None) -> str:
    if not e or not e["n"]:
        return f"{'-':>28}"
    return f"{e['n']:>6} {e['median_ape']:>7.1f}% {e['median_error']:>+7.1f}% {e['faster_share']:>6.0%}"


def served_terms(c) -> str:
    """The cost terms serving fits (core.profile.CostParams), in words."""
    return (f"per sequence {c.per_seq_s * 1e3:.3f} ms, per prefill chunk {c.per_chunk_s * 1e3:.3f} ms, "
            f"after a prefill {c.after_prefill_s * 1e3:.3f} ms, after an idle gap "
            f"{c.after_idle_s * 1e3:.3f} ms, a steady decode {c.steady_s * 1e3:+.3f} ms")


def table(after: dict, before: dict | None, where: str, labels=("given profile", "fitted")) -> str:
    """Per step kind: n, median |error|, median signed error, share predicted faster."""
    cols = "n  |err|  signed  faster"
    head = f"  {'step kind':<14}" + (f"{labels[0]:>28}" if before else "") + f"{labels[1]:>28}"
    lines = [f"per-step error {where} (|err|: median absolute, signed: median, + = predicted "
             "slower; faster: share of steps predicted faster)", head,
             f"  {'':<14}" + (f"{cols:>28}" if before else "") + f"{cols:>28}"]
    for k in KINDS:
        lines.append(f"  {k:<14}{_cell(before.get(k)) if before else ''}{_cell(after.get(k))}")
    return "\n".join(lines)


def run_from_runs(args: argparse.Namespace) -> int:
    from batchlab.calibration.from_run import from_runs
    if args.holdout_every < 0 or args.holdout_every == 1:
        raise UserError(f"--holdout-every must be 0 (none) or >= 2, got {args.holdout_every}")
    out = profile_out_path(args) if args.out else None  # checked before any work
    profile = None
    if args.profile:
        try:
            profile = load_profile(args.profile)
        except ProfileError as e:
            raise UserError(str(e)) from None
    try:
        result = from_runs(args.from_run, profile, str(args.profile or ""), args.holdout_every)
    except ValueError as e:
        raise UserError(str(e)) from None
    if out is None:
        model = result.profile.model_source or result.profile.model.name
        out = profile_out_path(args, f"{Path(model.rstrip('/')).name}-served.json")
    result.profile.save(out)
    if args.format == "json":
        print(json.dumps({"profile": str(out), "fitted_on": result.fitted_on,
                          "judged_on": result.judged_on, "scale": result.scale._asdict() if result.scale else None,
                          "heldout": result.after, "heldout_given_profile": result.before,
                          "train": result.train}, indent=1))
        return 0
    print(f"fitted on: {', '.join(result.fitted_on)}")
    print(f"judged on: {', '.join(result.judged_on) or 'none (--holdout-every 0)'}")
    if result.scale is not None:
        print(f"serving level: served steps run {result.scale} the profile's price of the same shape")
    print(f"terms: {served_terms(result.profile.cost)}\n")
    if result.after:
        print(table(result.after, result.before, "on the held-out runs"))
    print(f"\nprofile written to {out}; use it with batchlab simulate --profile {out}")
    return 0
