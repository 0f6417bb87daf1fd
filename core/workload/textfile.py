"""Reading trace files line by line, in chunks, so that a file of any length is held
in memory only as numpy columns (plus one chunk of text at a time).

Both readers yield `(line_numbers, values)` chunks: `values` maps a column (CSV) or key
(JSON lines) to the raw values of that chunk, and `line_numbers` lets a later check name
the exact line of a bad value. Blank lines and lines starting with `#` are skipped
anywhere (a provenance comment can head any trace). Fields are comma-separated without
quoting: none of the supported formats needs a comma inside a field.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Iterator

from core.workload.errors import WorkloadError

CHUNK = 65_536
Chunk = tuple[list[int], dict[str, list]]


def content_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, stripped text) of the lines that hold data."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise WorkloadError(path, None, "no such file; expected a trace file") from None
    except IsADirectoryError:
        raise WorkloadError(path, None, "is a directory; expected a trace file") from None
    except OSError as e:
        raise WorkloadError(path, None, f"cannot read: {e.strerror}") from None
    with f:
        for no, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise WorkloadError(path, no, "not UTF-8 text; expected a CSV or JSON lines "
                                              "trace") from None
            text = text.strip().lstrip("\ufeff")  # a byte-order mark from spreadsheet exports
            if text and not text.startswith("#"):
                yield no, text


def first_line(path: str | Path) -> tuple[int, str]:
    for no, text in content_lines(path):
        return no, text
    raise WorkloadError(path, 1, "empty file; expected a CSV header or a JSON line")


def split_header(text: str) -> list[str]:
    return [h.strip().strip('"') for h in text.split(",")]


def _chunked(rows: Iterable[tuple[int, tuple]], names: list[str]) -> Iterator[Chunk]:
    nos: list[int] = []
    got: list[tuple] = []
    for no, values in rows:
        nos.append(no)
        got.append(values)
        if len(nos) == CHUNK:
            yield nos, dict(zip(names, map(list, zip(*got))))
            nos, got = [], []
    if nos:
        yield nos, dict(zip(names, map(list, zip(*got))))


def csv_chunks(path: str | Path, columns: list[str], optional: list[str], what: str
               ) -> Iterator[Chunk]:
    """Chunks of the named columns (those of `optional` that the header has) of a CSV
    with a header line."""
    lines = content_lines(path)
    head_no, head = next(lines, (1, ""))
    if not head:
        raise WorkloadError(path, 1, f"empty file; expected a header line {','.join(columns)}")
    names = split_header(head)
    missing = [c for c in columns if c not in names]
    if missing:
        raise WorkloadError(path, head_no, f"missing column {missing[0]!r}; expected a header "
                                           f"with {','.join(columns)} ({what})")
    wanted = [c for c in [*columns, *optional] if c in names]
    index = [names.index(c) for c in wanted]
    width = len(names)

    def rows() -> Iterator[tuple[int, tuple]]:
        for no, text in lines:
            fields = text.split(",")
            if len(fields) != width:
                raise WorkloadError(path, no, f"{len(fields)} fields; expected {width} as in "
                                              f"the header on line {head_no}")
            yield no, tuple(fields[i] for i in index)

    empty = True
    for chunk in _chunked(rows(), wanted):
        empty = False
        yield chunk
    if empty:
        raise WorkloadError(path, head_no + 1, "no requests after the header; expected at "
                                               "least one data row")


def jsonl_chunks(path: str | Path, keys: list[str], optional: list[str], what: str
                 ) -> Iterator[Chunk]:
    """Chunks of the named keys of a file with one JSON object per line; an optional key
    that a line lacks reads as None."""
    wanted = [*keys, *optional]

    def rows() -> Iterator[tuple[int, tuple]]:
        for no, text in content_lines(path):
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise WorkloadError(path, no, f"not valid JSON ({e.msg} at column {e.colno}); "
                                              f"expected one JSON object per line") from None
            if not isinstance(obj, dict):
                raise WorkloadError(path, no, f"a JSON {type(obj).__name__}; expected an "
                                              f"object with keys {', '.join(keys)} ({what})")
            for k in keys:
                if k not in obj:
                    raise WorkloadError(path, no, f"missing key {k!r}; expected keys "
                                                  f"{', '.join(keys)} ({what})")
            yield no, tuple(obj.get(k) for k in wanted)

    empty = True
    for chunk in _chunked(rows(), wanted):
        empty = False
        yield chunk
    if empty:
        raise WorkloadError(path, 1, "no requests; expected one JSON object per line")
