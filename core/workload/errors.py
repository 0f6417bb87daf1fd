"""Errors and warnings about workload input, one line each, compiler style:
`FILE:LINE: what is wrong; what was expected`.

WorkloadError is a ValueError so the CLI's single `except ValueError` turns it into
"batchlab: error: <message>" with exit code 2, never a traceback. Warnings (for example
timestamps that go backwards and were sorted) go to the "batchlab.workload" logger; with
no logging configured, Python prints the bare message to stderr.
"""
from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("batchlab.workload")


def _where(path: str | Path | None, line: int | None) -> str:
    if path is None:
        return ""
    return f"{path}:{line}: " if line is not None else f"{path}: "


class WorkloadError(ValueError):
    """Bad workload input. `path` and `line` (1-based) say where, when known."""

    def __init__(self, path: str | Path | None, line: int | None, problem: str) -> None:
        self.path, self.line, self.problem = path, line, problem
        super().__init__(f"{_where(path, line)}{problem}")


def warn(path: str | Path | None, line: int | None, problem: str) -> None:
    log.warning("%s%s", _where(path, line), problem)
