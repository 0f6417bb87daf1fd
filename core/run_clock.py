"""A fast-forward run's clock: its steps' durations and the times they take it to, each
time the previous one plus the step's duration (the sums the clock makes when stepping),
so that a run is priced and read without a Python float a step where the C build runs.

This file is the reference, and what runs under BATCHLAB_PURE=1 or where no C compiler
built core/run_clock.c, the same class over C doubles (batchlab/_compiled.py IN_C): the
two give the same bits (tests/test_run_clock.py)."""
from __future__ import annotations

from array import array
from bisect import bisect_left

import numpy as np

# line(): stretches at least this long are priced in numpy (the pure build only: its
# loop's step costs more than numpy's set-up spread over them), elementwise the same
# arithmetic, the same bits (core/cost/gpu_step.py's SHORT_PLAIN).
NUMPY_FROM = 48


class RunClock:
    """times[0] the run's start, times[j] the end of step j; durations[j - 1] step j's."""
    __slots__ = ("_t", "_d")

    def __init__(self, t0: float) -> None:
        self._t: list[float] = [float(t0)]
        self._d: list[float] = []

    def __len__(self) -> int:
        """The steps."""
        return len(self._d)

    def add(self, d: float) -> None:
        """One step of duration d."""
        self._d.append(d)
        self._t.append(self._t[-1] + d)

    def extend(self, durations: list[float]) -> None:
        """Steps of these durations, in order."""
        times, t = self._t, self._t[-1]
        for d in durations:
            t += d
            times.append(t)
        self._d.extend(durations)

    def line(self, fixed: float, kv_coef: float, pair_coef: float, kv0: int, n: int, m: int) -> None:
        """m steps of fixed + (kv_coef * kv + pair_coef * kv), kv = kv0 + j n (j = 0..m-1):
        a decode stretch of a price linear in its KV read (core/cost/form.py line_times)."""
        if m >= NUMPY_FROM:
            kv = kv0 + np.arange(m, dtype=np.int64) * n
            self.extend((fixed + (kv_coef * kv + pair_coef * kv)).tolist())
            return
        out: list[float] = []
        for j in range(m):
            kv_j = kv0 + j * n
            out.append(fixed + (kv_coef * kv_j + pair_coef * kv_j))
        self.extend(out)

    def time(self, j: int) -> float:
        """times[j], 0 <= j <= the steps."""
        return self._t[_bounded(j, len(self._d))]

    def bisect(self, x: float, hi: int) -> int:
        """bisect_left(times, x, 0, hi), hi at most the steps."""
        return bisect_left(self._t, x, 0, _bounded(hi, len(self._d)))

    def times(self, lo: int, hi: int) -> list[float]:
        """times[lo:hi], hi at most the steps + 1."""
        limit = len(self._t)
        return self._t[_bounded(lo, limit):_bounded(hi, limit)]

    def durations(self) -> list[float]:
        return self._d[:]

    def gaps(self, lo: int, hi: int) -> bytes:
        """times[j + 1] - times[j] for j = lo..hi - 1 (hi at most the steps), as the bytes of
        doubles (array("d").frombytes)."""
        t, limit = self._t, len(self._d)
        return array("d", [t[j + 1] - t[j] for j in range(_bounded(lo, limit), _bounded(hi, limit))]).tobytes()


def _bounded(j: int, limit: int) -> int:
    if not 0 <= j <= limit:
        raise IndexError("RunClock: no such time")
    return j
