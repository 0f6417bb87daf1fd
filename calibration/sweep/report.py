"""A swept profile's report: fit quality, fitted rates, the serving phase and, on request,
every grid point's error."""
from __future__ import annotations

from pathlib import Path

from batchlab.calibration.fit.calibrated import Calibrated
from batchlab.calibration.fit.report import fit_table, points_table, rates_table
from batchlab.calibration.fit.served_report import served_terms, table
from batchlab.calibration.sweep.runner import measurements_path
from batchlab.core.cost.profile import Profile


def serving_lines(profile: Profile) -> list[str]:
    sv = profile.serving
    if not sv:
        return []
    lines = [f"\nserving phase: {sv['steps']} steps served ({', '.join(sv['policies'])}); served steps "
             f"run x{sv['scale']:.3f} the sweep's price on memory and fixed costs, "
             f"x{sv.get('compute_scale', sv['scale']):.3f} on compute; {served_terms(profile.cost)}"]
    if profile.loop:
        lp = profile.loop
        lines.append(f"serving loop between steps: {lp.per_step_ms:.3f} ms + {lp.per_seq_ms:.4f} ms a sequence "
                     f"({lp.gaps} busy gaps; the simulator adds it to every step)")
    return lines + [table(sv["after"], sv["before"], "on the served steps (fitted on them)",
                          ("sweep's fit", "refined"))]


def swept(profile: Profile, out: Path, points: bool = False) -> Calibrated:
    """points: every grid point's measured and priced time too."""
    lines = [f"{profile.describe()}: {len(profile.measurements or [])} grid points, sweep "
             f"{profile.sweep_s:.0f} s, total {profile.total_s:.0f} s\n",
             fit_table(profile), "", rates_table(profile), *serving_lines(profile)]
    if points:
        lines += ["", points_table(profile)]
    summary = {"fit": profile.fit.model_dump(), "effective": profile.effective.model_dump(),
               "sweep_s": profile.sweep_s, "total_s": profile.total_s}
    raw = str(measurements_path(out)).replace("{", "{{").replace("}", "}}")
    return Calibrated(profile, lines, summary, written=(
        f"\nprofile written to {{out}} (raw timings: {raw}); use it with batchlab simulate --profile {{out}}"))
