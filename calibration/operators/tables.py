"""Reading operator tables: CSV rows with their line numbers, and numbers checked where
they are read, so that bad input is one line naming the file, the line and the column."""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from batchlab.core import text_input


class OperatorTableError(ValueError):
    """A table the calibration cannot use: the message names file, line and column."""


def where(path: Path | str, line: int | None = None, column: str | None = None) -> str:
    at = str(path)
    if line is not None:
        at += f": line {line}"
    if column is not None:
        at += f", column {column}"
    return at


def read_rows(path: Path, required: tuple[str, ...], what: str) -> list[tuple[int, dict[str, str]]]:
    """(line number, row) of a CSV whose header has every required column."""
    try:
        reader = csv.DictReader(io.StringIO(text_input.read_text(path)))
        header = reader.fieldnames or []
        try:
            text_input.check_header(header, where(path, 1))
        except ValueError as e:
            raise OperatorTableError(str(e)) from None
        missing = [c for c in required if c not in header]
        if missing:
            raise OperatorTableError(f"{where(path, 1)}: missing column {', '.join(missing)} "
                                     f"(a {what} has {', '.join(required)})")
        return [(i + 2, row) for i, row in enumerate(reader)]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise OperatorTableError(f"{path}: cannot read it as a CSV table ({e})") from None


def number(path: Path, line: int, row: dict[str, str], column: str) -> float:
    raw = row.get(column)
    try:
        v = float(raw)
    except (TypeError, ValueError):
        raise OperatorTableError(f"{where(path, line, column)}: expected a number, got {raw!r}") from None
    if not math.isfinite(v):
        raise OperatorTableError(f"{where(path, line, column)}: expected a finite number, got {raw!r}")
    return v


def time_ms(path: Path, line: int, row: dict[str, str], column: str) -> float:
    """A timing in milliseconds, as seconds: positive and finite."""
    v = number(path, line, row, column)
    if v <= 0:
        raise OperatorTableError(f"{where(path, line, column)}: expected a positive time in ms, got {row[column]!r}")
    return v / 1e3


def count(path: Path, line: int, row: dict[str, str], column: str, least: int = 1) -> int:
    """A whole number of at least `least` (a shape: heads, tokens, GPUs)."""
    v = number(path, line, row, column)
    if v != int(v) or v < least:
        raise OperatorTableError(f"{where(path, line, column)}: expected a whole number >= {least}, "
                                 f"got {row[column]!r}")
    return int(v)


# Two timings of the same shape further apart than this are not noise: one of them is
# of something else (the shared data's repeats differ by 20% at most).
CONFLICT_RATIO = 1.5


def check_repeat(path: Path, line: int, first_line: int, column: str, a: float, b: float) -> None:
    if max(a, b) > CONFLICT_RATIO * min(a, b):
        raise OperatorTableError(
            f"{where(path, line, column)}: {b * 1e3:.4g} ms conflicts with {a * 1e3:.4g} ms for the "
            f"same shape on line {first_line} (repeats may differ by x{CONFLICT_RATIO} at most)")
