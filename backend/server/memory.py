"""Gives the heap memory a long-running server freed back to the system.

In serve's soak (docs/results/2026-12-06-serve-soak.md) memory grew with each new step
shape, not with requests: oneDNN's kernel caches (bounded now that backend/linear.py pads
rows to a bounded set of shapes) and memory glibc kept after torch freed it (about 40% of
the growth). `HeapTrim` calls malloc_trim(0) between steps once the loop has been idle
`idle_s` after work (a request arriving in a short gap does not wait for a trim), and under
unbroken load at most every `every_s`; each is a pause of the engine thread, counted."""
from __future__ import annotations

import ctypes
import ctypes.util
import time
from collections.abc import Callable

TRIM_EVERY_S = 30.0  # under load; a trim took 4-20 ms (results page)
TRIM_AFTER_IDLE_S = 0.5


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


class HeapTrim:
    def __init__(self, every_s: float = TRIM_EVERY_S, idle_s: float = TRIM_AFTER_IDLE_S,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.every_s, self.idle_s, self.clock = every_s, idle_s, clock
        self._trim = _malloc_trim()
        self._last = clock()
        self._dirty = False  # steps ran since the last trim
        self._idle_since: float | None = None
        self.count = 0
        self.seconds = 0.0

    @property
    def available(self) -> bool:
        return self._trim is not None

    def after_step(self) -> None:
        self._dirty, self._idle_since = True, None
        if self.clock() - self._last >= self.every_s:
            self.trim()

    def on_idle(self) -> None:
        """The loop found no work (it calls this each time it looks)."""
        if not self._dirty:
            return
        now = self.clock()
        if self._idle_since is None:
            self._idle_since = now
        if now - self._idle_since >= self.idle_s:
            self.trim()

    def trim(self) -> None:
        t = self.clock()
        if self._trim is not None:
            self._trim(0)
            self.count += 1
        self._last, self._dirty = self.clock(), False
        self.seconds += self._last - t
