"""Run a function in a fresh, spawned process: what a process has run before changes
how fast it runs next: a token count's first execution costs more, and steady decodes
run slower after a calibration sweep in the same process
(docs/results/2026-12-01-calibration-serving.md)."""
from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable


def run_fresh(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any | None:
    """fn(*args, **kw) in a spawned process, or None where none could run (a caller whose
    __main__ cannot be re-imported: a script without a main guard, stdin, some notebooks).
    Shut down and joined on exit (a Pool's terminate leaves a semaphore behind)."""
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            return pool.submit(fn, *args, **kw).result()
    except BrokenProcessPool:
        return None
