"""Sweep results on disk as they finish: one JSON line per point in points.jsonl,
keyed by the point's hash. A rerun of the same grid into the same folder reads what is
there and runs only the points missing (an interrupted sweep resumes); a line cut off
by the interrupt is ignored, and that point runs again."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from batchlab.experiments.errors import UserError

FILE = "points.jsonl"


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


class PointStore:
    def __init__(self, out: Path) -> None:
        self.path = out / FILE
        self.done: dict[str, dict] = {}
        try:
            out.mkdir(parents=True, exist_ok=True)
            if self.path.exists():
                for line in self.path.read_text().splitlines():
                    try:
                        row = json.loads(line)
                    except ValueError:
                        continue  # cut off mid-write
                    if isinstance(row, dict) and "point_hash" in row:
                        self.done[row["point_hash"]] = row
            self._f = open(self.path, "a")
            if self._f.tell() and not self.path.read_bytes().endswith(b"\n"):
                self._f.write("\n")  # end the cut-off line, or the next row would join it
        except OSError as e:
            raise UserError(f"--out {out}: cannot write there: {e.strerror}") from None

    def add(self, row: dict) -> None:
        self.done[row["point_hash"]] = row
        self._f.write(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def restore(row: dict) -> dict:
    """A row as read back: infinities were written as strings, NaN as null."""
    return {k: (float(v) if v in ("inf", "-inf") else (math.nan if v is None else v))
            for k, v in row.items()}
