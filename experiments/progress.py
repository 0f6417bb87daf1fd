"""A progress bar on stderr when a person watches it (a terminal), else nothing: tqdm
loads only then, so a piped or scripted run does not pay for it."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Iterator


class _Silent:
    def update(self, n: int = 1) -> None:
        pass


@contextmanager
def progress_bar(**tqdm_args: Any) -> Iterator[Any]:
    """tqdm(**tqdm_args) if stderr is a terminal, else an object whose update does nothing."""
    if not sys.stderr.isatty():
        yield _Silent()
        return
    from tqdm import tqdm  # lazy: tqdm, only where stderr is a terminal
    with tqdm(**tqdm_args) as bar:
        yield bar
