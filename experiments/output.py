"""Writing results: per policy a requests.csv and a steps.csv, and one summary.json
keyed by policy, rewritten after each policy so an interrupt keeps what finished."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from core.result import RunResult


def _clean(x: Any) -> Any:
    """JSON has no NaN: write null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def to_json(obj: Any) -> str:
    return json.dumps(_clean(obj), indent=2, sort_keys=False)


def write_table(path: Path, table: dict[str, np.ndarray]) -> None:
    cols = list(table)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerows(zip(*(table[c].tolist() for c in cols)))


class ResultWriter:
    def __init__(self, out_dir: str | Path, config: dict[str, Any]) -> None:
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "config.json").write_text(to_json(config) + "\n")
        self.summaries: dict[str, dict] = {}
        self.meta: dict[str, dict] = {}

    def add(self, name: str, result: RunResult, summary: dict[str, float]) -> None:
        sub = self.dir / name
        sub.mkdir(exist_ok=True)
        write_table(sub / "requests.csv", result.requests)
        if result.steps is not None:
            write_table(sub / "steps.csv", result.steps)
        self.summaries[name] = summary
        self.meta[name] = result.meta
        (self.dir / "summary.json").write_text(to_json(self.summaries) + "\n")
        (self.dir / "meta.json").write_text(to_json(self.meta) + "\n")
