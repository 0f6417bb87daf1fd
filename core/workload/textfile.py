"""Reading trace files in chunks of lines, so that a file of any length is held in
memory only as numpy columns plus one chunk of text at a time, with the per-line work in
list comprehensions (a 1,000,000-row CSV reads in about 2 s on a small VM).

Both readers yield `(line_numbers, values)` chunks: `values` maps a column (CSV) or key
(JSON lines) to the raw values of that chunk, and `line_numbers` lets a later check name
the exact line of a bad value. Blank lines and lines starting with `#` are skipped
anywhere (a provenance comment can head any trace). Fields are comma-separated without
quoting: none of the supported formats needs a comma inside a field. Read one way: a
byte-order mark is dropped, CR-LF and CR-only line endings read as LF, and a column or
a JSON key given twice is refused with its line.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Iterator

from batchlab.core.sizes import BYTES_PER_TRACE_ROW, require_memory
from batchlab.core.text_input import DuplicateKey, duplicate, loads
from batchlab.core.workload.errors import WorkloadError

CHUNK_BYTES = 1 << 20  # ~40k lines: a chunk of parsed text stays near 20 MB
MAX_LINE_BYTES = 1 << 20  # a Mooncake line of a 128k-token prompt is ~3 kB
HEAD_BYTES = 1 << 14  # first_line's reads: a header, not a chunk of the file to decode
Chunk = tuple[list[int], dict[str, list]]


class _LongLine(WorkloadError):
    """An unfinished line past MAX_LINE_BYTES. (When it is seen depends on the chunk
    size: first_line's small reads then defer to the reader's own.)"""


def line_chunks(path: str | Path, chunk_bytes: int = CHUNK_BYTES
               ) -> Iterator[tuple[list[int], list[str]]]:
    """(1-based line numbers, stripped texts) of the lines that hold data, in chunks of
    about chunk_bytes (a longer line is read whole). A device (/dev/zero), a line longer
    than MAX_LINE_BYTES or a file too large for this machine's memory is refused before
    it is read."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise WorkloadError(path, None, "no such file; expected a trace file") from None
    except IsADirectoryError:
        raise WorkloadError(path, None, "is a directory; expected a trace file") from None
    except OSError as e:
        raise WorkloadError(path, None, f"cannot read: {e.strerror}") from None
    with f:
        st = os.fstat(f.fileno())
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            raise WorkloadError(path, None, "is a device, not a file; expected a trace file")
        start, rest, first = 1, b"", True
        while True:
            block = f.read(chunk_bytes)
            data = rest + block
            if block and data.endswith(b"\r"):  # maybe a CR-LF cut in two: decide next time
                data, cr = data[:-1], b"\r"
            else:
                cr = b""
            # CR-LF and CR-only line endings read as LF (one way, whatever wrote the file)
            raw = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
            rest = raw.pop() + cr if block else b""  # an unfinished last line waits for more
            if len(rest) > MAX_LINE_BYTES:
                raise _LongLine(path, start + len(raw), f"a line longer than "
                                f"{MAX_LINE_BYTES // 2**20} MiB; expected a CSV or JSON "
                                f"lines trace")
            if raw == [b""] and not block:
                break
            if first and stat.S_ISREG(st.st_mode) and block:
                # Rows held as columns cost far more than their text: refuse a file
                # whose rows cannot fit, before reading it all.
                rows = st.st_size / max(1.0, len(block) / max(1, len(raw)))
                require_memory(rows * BYTES_PER_TRACE_ROW + st.st_size,
                               f"{path}: a trace of {st.st_size:,} bytes (~{rows:,.0f} rows)")
            try:
                texts = [r.decode("utf-8").strip() for r in raw]
            except UnicodeDecodeError:
                bad = next(i for i, r in enumerate(raw) if not _is_utf8(r))
                raise WorkloadError(path, start + bad, "not UTF-8 text; expected a CSV or "
                                                       "JSON lines trace") from None
            if first and texts:
                texts[0] = texts[0].lstrip("\ufeff")  # byte-order mark of spreadsheet exports
            first = False
            keep = [i for i, t in enumerate(texts) if t and t[0] != "#"]
            if keep:
                yield [start + i for i in keep], [texts[i] for i in keep]
            start += len(raw)
            if not block:
                break


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def first_line(path: str | Path) -> tuple[int, str]:
    """The first line that holds data, read a few kB at a time, not a whole chunk."""
    try:
        chunk = next(line_chunks(path, HEAD_BYTES), None)
    except _LongLine:
        chunk = next(line_chunks(path), None)
    if chunk is None:
        raise WorkloadError(path, 1, "empty file; expected a CSV header or a JSON line")
    nos, texts = chunk
    return nos[0], texts[0]


def json_error(path: str | Path, no: int, e: json.JSONDecodeError) -> WorkloadError:
    return WorkloadError(path, no, f"not valid JSON: {e.msg} (column {e.colno}); expected "
                                   f"one JSON object per line")


def split_header(text: str) -> list[str]:
    return [h.strip().strip('"') for h in text.split(",")]


def csv_chunks(path: str | Path, columns: list[str], optional: list[str], what: str
               ) -> Iterator[Chunk]:
    """Chunks of the named columns (and of those in `optional` that the header has) of a
    CSV with a header line."""
    head_no, names, seen = 0, None, 0
    for nos, texts in line_chunks(path):
        if names is None:
            head_no, names = nos[0], split_header(texts[0])
            dup = duplicate(names)
            if dup:
                raise WorkloadError(path, head_no, f"column {dup[0]!r} appears twice in the header "
                                                   f"(columns {dup[1]} and {dup[2]}); expected each "
                                                   f"column once")
            missing = [c for c in columns if c not in names]
            if missing:
                raise WorkloadError(path, head_no, f"missing column {missing[0]!r}; expected a "
                                                   f"header with {','.join(columns)} ({what})")
            nos, texts = nos[1:], texts[1:]
            if not nos:
                continue
        rows = [t.split(",") for t in texts]
        for no, row in zip(nos, rows):
            if len(row) != len(names):
                raise WorkloadError(path, no, f"{len(row)} fields; expected {len(names)} as "
                                              f"in the header on line {head_no}")
        by_index = list(zip(*rows))
        seen += len(nos)
        yield nos, {c: list(by_index[names.index(c)])
                    for c in [*columns, *optional] if c in names}
    if names is None:
        raise WorkloadError(path, 1, f"empty file; expected a header line {','.join(columns)}")
    if not seen:
        raise WorkloadError(path, head_no + 1, "no requests after the header; expected at "
                                               "least one data row")


def jsonl_chunks(path: str | Path, keys: list[str], optional: list[str], what: str
                 ) -> Iterator[Chunk]:
    """Chunks of the named keys of a file with one JSON object per line; an optional key
    that a line lacks reads as None."""
    seen = 0
    for nos, texts in line_chunks(path):
        try:
            objs = [loads(t) for t in texts]
        except ValueError:  # not JSON, or a key twice in one object: find the line
            for no, t in zip(nos, texts):
                try:
                    loads(t)
                except json.JSONDecodeError as e:
                    raise json_error(path, no, e) from None
                except DuplicateKey as e:
                    raise WorkloadError(path, no, str(e)) from None
            raise
        for no, obj in zip(nos, objs):
            if type(obj) is not dict:
                raise WorkloadError(path, no, f"a JSON {type(obj).__name__}; expected an "
                                              f"object with keys {', '.join(keys)} ({what})")
            for k in keys:
                if k not in obj:
                    raise WorkloadError(path, no, f"missing key {k!r}; expected keys "
                                                  f"{', '.join(keys)} ({what})")
        seen += len(nos)
        yield nos, {k: [obj.get(k) for obj in objs] for k in [*keys, *optional]}
    if not seen:
        raise WorkloadError(path, 1, "no requests; expected one JSON object per line")
