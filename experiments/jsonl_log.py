"""An append-only log of JSON lines, each on disk (flushed, fsync'ed) before the next
result is taken: what a long run (a capacity search) has finished survives a kill. A
reader skips a last line a kill cut off (read_jsonl)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from batchlab.core.atomic import WriteError, describe
from batchlab.core.run_folder import _clean


class JsonlLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._f = open(path, "w", encoding="utf-8")  # noqa: SIM115 - kept open: one line a result
        except OSError as e:
            raise WriteError(describe(e, path)) from None

    def add(self, obj: Any) -> None:
        try:
            self._f.write(json.dumps(_clean(obj)) + "\n")
            self._f.flush()
            os.fsync(self._f.fileno())
        except OSError as e:
            raise WriteError(describe(e, self.path).replace("nothing half-written", "no cut-off line")) from None

    def close(self) -> None:
        self._f.close()


def read_jsonl(path: Path) -> list[Any]:
    """Every whole line of a JsonlLog (a line cut off by a kill is skipped)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
