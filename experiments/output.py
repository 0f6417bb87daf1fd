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
from experiments.errors import UserError


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


# What a run writes per policy folder; only these are ever removed.
TABLES = ("requests.csv", "steps.csv")


class ResultWriter:
    def __init__(self, out_dir: str | Path, config: dict[str, Any]) -> None:
        """Create `out_dir` (an error if that is a file), clear an earlier run's results
        from it and write config.json; done before anything is simulated or served."""
        self.dir = Path(out_dir)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            remove_earlier_results(self.dir)
            (self.dir / "config.json").write_text(to_json(config) + "\n")
        except FileExistsError:
            raise UserError(f"--out {out_dir}: is a file; expected a directory "
                            "(created if missing)") from None
        except OSError as e:
            raise UserError(f"--out {out_dir}: cannot write there: {e.strerror} "
                            f"({e.filename})") from None
        self.summaries: dict[str, dict] = {}
        self.meta: dict[str, dict] = {}

    def add(self, name: str, result: RunResult, summary: dict[str, float]) -> None:
        sub = self.dir / name
        sub.mkdir(exist_ok=True)
        write_table(sub / TABLES[0], result.requests)
        if result.steps is not None:
            write_table(sub / TABLES[1], result.steps)
        self.summaries[name] = summary
        self.meta[name] = result.meta
        (self.dir / "summary.json").write_text(to_json(self.summaries) + "\n")
        (self.dir / "meta.json").write_text(to_json(self.meta) + "\n")


def remove_earlier_results(out: Path) -> None:
    """A reused --out directory must not mix two runs (a `chunked/` left from an earlier
    run beside a summary listing only `static`). The policies an earlier batchlab run
    lists in its summary.json or meta.json lose their tables (and their folders, if that
    empties them), and those two files go; anything batchlab did not write stays."""
    policies: set[str] = set()
    for name in ("summary.json", "meta.json"):
        try:
            listed = json.loads((out / name).read_text())
        except (OSError, ValueError):  # absent, or not a file we wrote
            continue
        if isinstance(listed, dict):
            # Only plain folder names: never follow a key such as "../x" out of `out`.
            policies.update(k for k in listed if k not in ("", ".", "..") and Path(k).name == k)
            (out / name).unlink()
    for policy in sorted(policies):
        folder = out / policy
        if folder.is_symlink() or not folder.is_dir():
            continue  # we only ever write real folders
        for table in TABLES:
            (folder / table).unlink(missing_ok=True)
        try:
            folder.rmdir()
        except OSError:
            pass  # absent, or holds files of someone else's: left as it is
