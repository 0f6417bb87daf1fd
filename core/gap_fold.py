"""Inter-token gaps on their way into a histogram (core/gap_histogram.py), for a recorder
without a step table: (gap, count) pairs wait in plain lists and a fast-forward run's gaps
as its clock gave them, and are folded FOLD_EVERY or so at a time. A histogram counts
gaps whatever their order, so they need no order here.

Lists, not typed arrays: compiled, a list append is a C call, where an array's is a call
through Python; and an array grown a run at a time was copied whole at many of its
reallocations, where a run's bytes wait as they are and are joined once a fold."""
from __future__ import annotations

import numpy as np

from batchlab.core.gap_histogram import GapHistogram

FOLD_EVERY = 1 << 16  # gap pairs buffered before folding into the histogram


class GapFold:
    def __init__(self) -> None:
        self.hist = GapHistogram()
        self._gaps: list[float] = []  # stepped pairs: gaps ...
        self._counts: list[int] = []  # ... and how many tokens had each
        # A run's gaps (steps 2..m's, doubles from its clock: no Python float a gap) ...
        self._run_gaps: list[bytes] = []
        self._run_gap_count = 0
        # ... and their counts (steps 2..m's sizes) run-length coded: sizes and how many
        # steps each held, expanded in numpy at the fold.
        self._run_sizes: list[int] = []
        self._run_lengths: list[int] = []

    def pair(self, gap: float, count: int) -> None:
        """`count` tokens came `gap` seconds after their previous one."""
        self._gaps.append(gap)
        self._counts.append(count)

    def ones(self, gaps: list[float]) -> None:
        """One token each after `gaps`."""
        self._gaps.extend(gaps)
        self._counts.extend([1] * len(gaps))

    def run_gaps(self, gaps: bytes, n: int) -> None:
        """n gaps as doubles (RunClock.gaps), their counts to follow by run_sizes."""
        self._run_gaps.append(gaps)
        self._run_gap_count += n

    def run_sizes(self, size: int, steps: int) -> None:
        """The next `steps` of the run gaps had `size` tokens each."""
        self._run_sizes.append(size)
        self._run_lengths.append(steps)

    def maybe_fold(self) -> None:
        """Keep at most about FOLD_EVERY gaps before the histogram."""
        if len(self._gaps) + self._run_gap_count > FOLD_EVERY:
            self.fold()

    def fold(self) -> None:
        gaps = np.array(self._gaps, dtype=np.float64)
        counts = np.array(self._counts, dtype=np.int64)
        if self._run_sizes:
            sizes = np.array(self._run_sizes, dtype=np.int64)
            gaps = np.concatenate((gaps, np.frombuffer(b"".join(self._run_gaps), dtype=np.float64)))
            counts = np.concatenate((counts, np.repeat(sizes, np.array(self._run_lengths, dtype=np.int64))))
            self._run_gaps, self._run_gap_count, self._run_sizes, self._run_lengths = [], 0, [], []
        self.hist.add(gaps, counts)
        self._gaps, self._counts = [], []
