"""docs/results/NAME.md from a study's study.json: the study's own report, rendered again
from the stored result, under a line saying when, on which machine and with which command
it was measured; figures (PNG files) stay with the run, named where they were."""
from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

from batchlab.experiments.studies.registry import get_study
from batchlab.experiments.studies.templates import template
from batchlab.core import atomic

_IMAGE = re.compile(r"^!\[(?P<alt>[^\]]*)\]\((?P<file>[^)]+)\)$", re.M)


def machine_text(m: dict) -> str:
    """'AMD EPYC 7B13 (2 CPUs), Python 3.11.2, numpy 2.3.5, torch 2.13.0 (1 thread)'."""
    text = f"{m['cpu']} ({m['cpus']} CPUs), Python {m['python']}, numpy {m['numpy']}"
    if m.get("torch"):
        text += f", torch {m['torch']} ({m['torch_threads']} thread{'s' if m['torch_threads'] != 1 else ''})"
    if m.get("gpu"):
        text += f", GPU {m['gpu']}"
    return text


def results_page(result: dict, source: str = "study.json") -> str:
    """The page for one study's result; source names the file in errors."""
    study = get_study(result.get("name", "?"))
    prov = result.get("provenance")
    if not prov:
        raise ValueError(f"{source}: no provenance (date, command, machine); expected a study.json "
                         f"written by `batchlab experiment {study.name}`")
    if study.report is None:
        raise ValueError(f"{source}: study {study.name} has no report function to render it from")
    title, _, body = study.report(result).partition("\n\n")
    tpl = template("results-page")
    date = datetime.datetime.fromisoformat(prov["date"]).strftime("%Y-%m-%d %H:%M UTC")
    head = tpl("header", date=date, machine=machine_text(prov["machine"]), command=prov["command"])
    body = _IMAGE.sub(lambda m: tpl("figure", alt=m["alt"], file=m["file"]), body)
    return f"{title}\n\n{head}\n\n{body}"


def write_page(study_dir: Path, docs: Path) -> Path:
    """Render study_dir/study.json to docs/NAME.md."""
    source = Path(study_dir) / "study.json"
    try:
        result = json.loads(source.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{source}: cannot read a study result ({e})") from None
    page = results_page(result, str(source))
    docs.mkdir(parents=True, exist_ok=True)
    out = docs / f"{result['name']}.md"
    atomic.write_text(out, page)
    return out
