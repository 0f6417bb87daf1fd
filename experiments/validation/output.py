"""--out DIR of `batchlab validate`: per policy, the run folder of every real run (real/,
real_2/ ... with --repeats) and simulation (sim/ the headline, sim_normalised/,
sim_normalised_2/ ... one per real run), and its figures (cdf.png; with repeats
cdf_band.png, sim against the real runs' band); at the top, comparison.json (the
judgement so far, records.py Validation, rewritten after each policy) and config.json.
With --endpoint: real/ (real_2/ ... with --repeats) and sim/ request tables beside
comparison.json."""
from __future__ import annotations

from pathlib import Path

from batchlab.core import run_folder
from batchlab.core.result import RunResult
from batchlab.core.run_folder import REQUESTS, to_json, write_table
from batchlab.experiments import figures as fg
from batchlab.experiments.output import make_out_dir
from batchlab.experiments.validation.figures import cdf_band, cdf_overlay
from batchlab.experiments.validation.judge import Judged
from batchlab.experiments.validation.records import Validation
from batchlab.core import atomic


def write_run(d: Path, result: RunResult) -> list[Path]:
    """A run's folder (core/run_folder.py): its request and step tables, its metadata and
    its summary with its stable/overloaded verdict."""
    stability = result.meta.stability
    summary = {**result.summary(), "stability": stability and stability.verdict}
    return run_folder.write_run(d, result, summary)


def figures(j: Judged, prefix: str = "") -> list[fg.Figure]:
    """The cell's figures, their files under prefix + POLICY/."""
    policy, reals = j.cell.policy, [r.result for r in j.side.reals]
    normalised = j.normalised[0].result if j.normalised else None
    runs = {"real": reals[0], "profile": j.headline.result, **({"normalised": normalised} if normalised else {})}
    out = [cdf_overlay(f"{prefix}{policy}/cdf.png", f"{policy}: real vs simulated TTFT and E2E latency", runs)]
    if len(reals) > 1:
        verdicts: dict[str, list[str]] = {}
        for m in j.cell.metrics:
            if m.verdict:
                verdicts.setdefault(m.metric, []).append(f"{m.stat} {m.verdict}")
        out.append(cdf_band(f"{prefix}{policy}/cdf_band.png", f"{policy}: simulated vs the band of "
                            f"{len(reals)} real runs", reals, j.headline.result, normalised,
                            {k: ", ".join(v) for k, v in verdicts.items()}))
    return out


class ValidationWriter:
    def __init__(self, out_dir: str | Path, config: dict) -> None:
        self.dir = make_out_dir(out_dir, config, clear=False)  # its layout is its own

    def add(self, j: Judged, judgement: Validation) -> list[Path]:
        """One judged cell's runs; comparison.json rewritten with the judgement so far."""
        base = self.dir / j.cell.policy
        runs = {"real": j.side.reals[0].result, **{f"real_{i}": r.result for i, r in enumerate(j.side.reals[1:], 2)},
                "sim": j.headline.result,
                **{("sim_normalised" if i == 1 else f"sim_normalised_{i}"): n.result
                   for i, n in enumerate(j.normalised, 1)}}
        written = []
        for folder, result in runs.items():
            written += write_run(base / folder, result)
        self.write_judgement(judgement)
        return written

    def draw(self, j: Judged) -> list[Path]:
        """The cell's figures drawn into its folder (matplotlib loads here)."""
        from batchlab.experiments.plots import draw  # lazy: matplotlib, only when a figure is drawn
        return [draw(f, self.dir) for f in figures(j)]

    def write_judgement(self, judgement: Validation) -> Path:
        path = self.dir / "comparison.json"
        atomic.write_text(path, to_json(judgement.as_dict()) + "\n")
        return path


def write_endpoint(out_dir: str | Path, config: dict, j: Judged, judgement: Validation) -> None:
    """--endpoint: the replay's and the simulation's request tables, and the judgement."""
    d = make_out_dir(out_dir, config)
    reals = [(f"real_{i}" if i > 1 else "real", r.result) for i, r in enumerate(j.side.reals, 1)]
    for name, result in (*reals, ("sim", j.headline.result)):
        (d / name).mkdir(exist_ok=True)
        write_table(d / name / REQUESTS, result.requests)
    atomic.write_text(d / "comparison.json", to_json(judgement.as_dict()) + "\n")
