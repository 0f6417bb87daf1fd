"""Every table, summary and document batchlab writes is written atomically: into a
temporary file in the same folder, flushed to disk (fsync), then renamed over the
target. A crash, a kill or a full disk leaves the previous file or none, never a file cut
off mid-row that looks complete. A write that fails is a WriteError (a ValueError: the
CLI prints its one line) naming the file; the temporary file is removed."""
from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

TEMP_SUFFIX = ".partial"  # a temporary file left by a kill -9 says what it is


class WriteError(ValueError):
    """A file could not be written (full disk, no permission, ...): one line."""


def describe(e: OSError, path: Path) -> str:
    why = "the disk is full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else (e.strerror or str(e))
    return f"cannot write {path}: {why}; nothing half-written was left there"


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs) -> Iterator[IO]:
    """open(path, mode) whose content appears at `path` only whole, when the block ends
    without an exception."""
    path = Path(path)
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files (mode 'w' or 'wb'), not {mode!r}")
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    except OSError as e:
        raise WriteError(describe(e, path)) from None
    # The file closes before _published renames it (the with's exits run inner first).
    with _published(tmp, path), os.fdopen(fd, mode, **kwargs) as f:
        yield f
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def _published(tmp: str, path: Path) -> Iterator[None]:
    """Run the block that fills `tmp`, then move it over `path`; on any failure remove
    `tmp` (an OSError becomes the one-line WriteError)."""
    try:
        yield
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; a result file is for everyone to read
        os.replace(tmp, path)
    except OSError as e:
        _discard(tmp)
        raise WriteError(describe(e, path)) from None
    except BaseException:
        _discard(tmp)
        raise


def _discard(tmp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_with(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """For writers that want a file name (Parquet, figures): write(temporary name), then
    the rename, as atomic_open."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
        os.close(fd)
    except OSError as e:
        raise WriteError(describe(e, path)) from None
    with _published(tmp, path):
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
