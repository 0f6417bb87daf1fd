"""A profile fitted on served runs (--from-run): what it was fitted and judged on, its
serving terms, and its error per step kind beside the profile it refined."""
from __future__ import annotations

from batchlab.calibration.fit.calibrated import Calibrated
from batchlab.calibration.fit.served_report import served_terms, table
from batchlab.calibration.served.from_run import FromRunResult


def from_runs_report(result: FromRunResult) -> Calibrated:
    lines = [f"fitted on: {', '.join(result.fitted_on)}",
             f"judged on: {', '.join(result.judged_on) or 'none (--holdout-every 0)'}"]
    if result.scale is not None:
        lines.append(f"serving level: served steps run {result.scale} the profile's price of the same shape")
    lines.append(f"terms: {served_terms(result.profile.cost)}\n")
    if result.after:
        lines.append(table(result.after, result.before, "on the held-out runs"))
    summary = {"fitted_on": result.fitted_on, "judged_on": result.judged_on,
               "scale": result.scale._asdict() if result.scale else None,
               "heldout": result.after, "heldout_given_profile": result.before, "train": result.train}
    return Calibrated(result.profile, lines, summary)
