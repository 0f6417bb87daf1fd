"""Rows (a list of flat dicts) to CSV and Parquet, side by side: CSV for eyes and
spreadsheets, Parquet (pyarrow) for dataframes, with the same columns."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from batchlab.core import atomic


def columns(rows: list[dict]) -> list[str]:
    cols: dict[str, None] = {}
    for r in rows:
        cols.update(dict.fromkeys(r))
    return list(cols)


def write_rows(stem: Path, rows: list[dict]) -> list[str]:
    """stem.csv and stem.parquet; the file names written."""
    cols = columns(rows)
    with atomic.atomic_open(stem.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow(["" if _missing(r.get(c)) else r.get(c) for c in cols])
    table = pa.table({c: [None if _missing(r.get(c)) else r.get(c) for r in rows] for c in cols})
    atomic.write_with(stem.with_suffix(".parquet"), lambda tmp: pq.write_table(table, tmp))
    return [stem.with_suffix(".csv").name, stem.with_suffix(".parquet").name]


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def text_table(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    """cols: (key, header, format); a missing value prints as -."""
    cells = [[("-" if _missing(r.get(k)) else f.format(r[k])) for k, _, f in cols] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h)
              for i, (_, h, _) in enumerate(cols)]
    line = lambda cs: "  ".join(c.rjust(w) for c, w in zip(cs, widths))
    return "\n".join([line([h for _, h, _ in cols]), line(["-" * w for w in widths]),
                      *(line(c) for c in cells)])
