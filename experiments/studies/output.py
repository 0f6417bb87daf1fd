"""What every study writes when it ends, next to its CSV tables: the figures drawn to PNG,
report.md (the study's report function, a template filled from the result), and
study.json: the result itself, JSON-able, with when, how and on which machine it ran, from
which docs/results pages are rendered (studies/results_page.py)."""
from __future__ import annotations

import datetime
import os
import platform
import sys
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from batchlab.experiments.figures import Figure
from batchlab.experiments.output import to_json
from batchlab.experiments.studies.common import Progress, command_line, pick
from batchlab.experiments.studies.registry import RunFn, register
from batchlab.core import atomic
from batchlab.core.cpu_name import cpu_name

ReportFn = Callable[[dict], str]
# The simulation half: (the result's fields, its figures) from the run and the size's PARAMS.
SimFn = Callable[["StudyRun", dict], "tuple[dict, list[Figure]]"]
# The --backend half: (result["backend"], its figures) from the output folder, size, progress.
ServeFn = Callable[[Path, str, Progress], "tuple[dict, list[Figure]]"]


class StudyRun:
    """One run of a study: its output folder, its progress line on stderr, its end."""

    def __init__(self, name: str, out_dir: Path, size: str, backend: bool, quiet: bool) -> None:
        self.name, self.out_dir, self.size, self.backend = name, Path(out_dir), size, backend
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.progress = Progress(name, quiet)

    def finish(self, result: dict, figures: Sequence[Figure], report: ReportFn) -> dict:
        """Draw the figures (their files are in result["files"] already), then write
        report.md and study.json; returns the result."""
        if figures:
            from batchlab.experiments.plots import draw  # matplotlib: only once there is a figure
            for f in figures:
                draw(f, self.out_dir)
        result["elapsed_s"] = self.progress.elapsed
        result["provenance"] = provenance(command_line(self.name, self.size, self.backend))
        atomic.write_text(self.out_dir / "report.md", report(result))
        result["files"] += ["report.md", "study.json"]
        atomic.write_text(self.out_dir / "study.json", to_json(result) + "\n")
        return result


def provenance(command: str) -> dict:
    """The date, the command and the machine: CPU model and count, Python and numpy, and
    torch's version, threads and GPU where a backend variant loaded it."""
    machine = {"cpu": cpu_name(), "cpus": os.cpu_count(), "python": platform.python_version(),
               "numpy": np.__version__}
    torch = sys.modules.get("torch")
    if torch is not None:  # imported by a --backend variant: never imported here
        machine.update(torch=torch.__version__, torch_threads=torch.get_num_threads(),
                       gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": command, "machine": machine}


def register_study(name: str, description: str, params: dict[str, dict], serve: ServeFn,
                   report: ReportFn) -> Callable[[SimFn], RunFn]:
    """Register (registry.register) a study with a --backend variant, its
    run(out_dir, size, backend, quiet) made here from its two halves: the size's params
    picked, the StudyRun opened, the simulation half run, the backend half served under
    result["backend"] if asked, and the end (StudyRun.finish)."""
    def deco(simulate: SimFn) -> RunFn:
        def run(out_dir: Path, size: str = "full", backend: bool = False, quiet: bool = False) -> dict:
            p = pick(params, size)
            this = StudyRun(name, out_dir, size, backend, quiet)
            fields, figures = simulate(this, p)
            result = {"name": name, "size": size, **fields}
            if backend:
                result["backend"], more = serve(this.out_dir, size, this.progress)
                result["files"] += result["backend"]["files"]
                figures = [*figures, *more]
            return this.finish(result, figures, report)
        return register(name, description, backend=True, report=report)(run)
    return deco
