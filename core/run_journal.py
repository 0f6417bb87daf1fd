"""The request rows of a run that may be killed (`batchlab serve`), on disk as they finish.

POLICY/requests.journal.csv beside where the run folder's requests.csv will go: a header
line, then a line per request that ended (finished, aborted, failed, rejected), in the
order they ended, with core/metrics.py's request columns (times unset: empty). Each batch
of rows is one write() of whole lines to a file opened for appending, so a kill (even
SIGKILL) keeps every row written before it. A crash of the machine mid-write can leave a
torn last line (no newline at its end, or too few fields): read_journal drops it and says
so. A clean stop writes the run folder (atomically) and removes the journal."""
from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from pathlib import Path

from batchlab.core.atomic import WriteError, describe
from batchlab.core.metrics import REQUEST_COLUMNS
from batchlab.core.request import Sequence

JOURNAL = "requests.journal.csv"
_TIMES = ("first_scheduled", "first_token", "finish")


def request_row(seq: Sequence, replica: int = 0) -> list:
    """A request's row as MetricsRecorder.record_requests records it (REQUEST_COLUMNS)."""
    r = seq.request
    first_scheduled, first_token, finish = (getattr(seq, t) for t in _TIMES)
    return [r.id, replica, r.arrival, r.prompt_len, r.output_len, r.priority,
            *("" if t < 0 else t for t in (first_scheduled, first_token, finish)),
            seq.preemptions, seq.status._value_, seq.reject_reason, seq.cached_tokens]


def _lines(rows: list[list]) -> bytes:
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)  # "\r\n", as requests.csv: a field holding \r or \n is quoted
    return buf.getvalue().encode("utf-8")


class RowJournal:
    """Appends request rows to `path` (created; it must not exist yet)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        except OSError as e:
            raise WriteError(describe(e, path)) from None
        self.rows = 0
        self._write(_lines([list(REQUEST_COLUMNS)]))

    def append(self, seqs: list[Sequence]) -> None:
        if seqs:
            self._write(_lines([request_row(s) for s in seqs]))
            self.rows += len(seqs)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:  # a regular file takes it in one write unless the disk fills
                view = view[os.write(self._fd, view):]
        except OSError as e:
            raise WriteError(describe(e, self.path).replace("; nothing half-written was left there",
                                                            "; its last line may be torn")) from None

    def close(self, remove: bool = False) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if remove:
            self.path.unlink(missing_ok=True)


@dataclass(frozen=True)
class Journal:
    """What a journal holds: its rows (text fields, REQUEST_COLUMNS) and whether a torn
    last line was dropped."""
    path: Path
    rows: list[dict[str, str]]
    torn: bool

    def count(self, status: str) -> int:
        return sum(r["status"] == status for r in self.rows)


def read_journal(path: Path) -> Journal:
    """The rows of a journal; a torn last line is dropped (torn=True). A ValueError of one
    line naming the file and line for anything else that is not as RowJournal writes it."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ValueError(f"{path}: cannot read it ({e.strerror})") from None
    torn = bool(data) and not data.endswith(b"\n")
    if torn:
        data = data[:data.rfind(b"\n") + 1]
    try:
        lines = list(csv.reader(io.StringIO(data.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"{path}: not a request journal as batchlab serve writes it ({e})") from None
    if not lines or tuple(lines[0]) != REQUEST_COLUMNS:
        raise ValueError(f"{path}: line 1 is not the request journal's header ({', '.join(REQUEST_COLUMNS)})")
    rows = []
    for n, fields in enumerate(lines[1:], 2):
        if len(fields) != len(REQUEST_COLUMNS):
            if n == len(lines):  # the last line, cut short by a crash
                torn = True
                break
            raise ValueError(f"{path}: line {n} has {len(fields)} fields; expected {len(REQUEST_COLUMNS)}")
        rows.append(dict(zip(REQUEST_COLUMNS, fields)))
    return Journal(path, rows, torn)
