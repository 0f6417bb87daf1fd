"""--out DIR of `batchlab validate`: per policy, both runs' tables (real/, real_2/ ... with
--repeats; sim/ for the headline variant; sim_normalised/, sim_overhead/, sim_scaled/,
sim_selffit/ for the others) and CDF plots (cdf_band.png: sim against the real runs' band);
at the top, comparison.json keyed by policy (rewritten after each policy), config.json."""
from __future__ import annotations

from pathlib import Path

from batchlab.core import run_folder
from batchlab.core.run_folder import to_json
from batchlab.experiments.output import make_out_dir
from batchlab.experiments.validation.pair import Run
from batchlab.experiments.validation.plot import cdf_overlay
from batchlab.experiments.validation.validate import HEADLINE, Validation

FOLDERS = {HEADLINE: "sim", "normalised": "sim_normalised", "profile+overhead": "sim_overhead",
           "speed-scaled": "sim_scaled", "self-fit": "sim_selffit"}


def write_run(d: Path, run: Run) -> list[Path]:
    """A run's folder (core/run_folder.py): its request and step tables, its metadata and
    its summary with its stable/overloaded verdict."""
    stability = run.result.meta.stability
    summary = {**run.result.summary(), "stability": stability and stability.verdict}
    return run_folder.write_run(d, run.result, summary)


class ValidationWriter:
    def __init__(self, out_dir: str | Path, config: dict) -> None:
        self.dir = make_out_dir(out_dir, config, clear=False)  # its layout is its own
        self.comparisons: dict[str, dict] = {}

    def add(self, v: Validation, comparison: dict) -> list[Path]:
        base = self.dir / v.policy
        runs = {"real": v.real, **{f"real_{i}": r for i, r in enumerate(v.again, 2)},
                **{FOLDERS.get(k, k): r for k, r in v.sims.items()},
                **{f"sim_normalised_{i}": r for i, r in enumerate(v.again_sims, 2)}}
        written = []
        for folder, run in runs.items():
            written += write_run(base / folder, run)
        title = f"{v.policy}: real vs simulated TTFT and E2E latency"
        written.append(cdf_overlay(base / "cdf.png", title,
                                   {"real": v.real.result, **{k: r.result for k, r in v.sims.items()}}))
        if v.again:
            from batchlab.experiments.validation.plot import cdf_band
            written.append(cdf_band(base / "cdf_band.png", f"{v.policy}: simulated vs the band of "
                                    f"{len(v.reals)} real runs",
                                    [r.result for r in v.reals], v.sims[HEADLINE].result,
                                    v.sims["normalised"].result))
        self.comparisons[v.policy] = comparison
        (self.dir / "comparison.json").write_text(to_json(self.comparisons) + "\n")
        return written
