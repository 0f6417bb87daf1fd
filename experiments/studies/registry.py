"""The study registry: each study module registers a name, a one-line description, a
`run(out_dir, size, backend, quiet) -> dict` that writes report.md, PNG plots and CSV
tables into out_dir and returns its measured figures, and the `report(result) -> str`
that writes report.md from those figures alone (so a stored study.json renders again)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

SIZES = ("full", "small")

RunFn = Callable[..., dict]
ReportFn = Callable[[dict], str]


@dataclass(frozen=True)
class Study:
    name: str
    description: str
    run: RunFn
    backend: bool = False  # has a --backend variant on the real torch backend
    profile: bool = False  # takes --profile (run(..., profile=PATH))
    real_only: bool = False  # always serves on the backend: in 'all' only with --backend
    report: ReportFn | None = None  # report.md from a result (None: only run() writes it)


STUDIES: dict[str, Study] = {}


def register(name: str, description: str, backend: bool = False, profile: bool = False,
             real_only: bool = False, report: ReportFn | None = None) -> Callable[[RunFn], RunFn]:
    def deco(fn: RunFn) -> RunFn:
        STUDIES[name] = Study(name, description, fn, backend or real_only, profile, real_only, report)
        return fn
    return deco


def get_study(name: str) -> Study:
    key = name.strip().lower().replace("_", "-")
    if key not in STUDIES:
        raise ValueError(f"unknown experiment {name!r}; expected one of {', '.join(STUDIES)} "
                         f"(see batchlab experiment --list)")
    return STUDIES[key]
