"""Closed-form prices for runs of decode steps, so the simulator can advance over many
steps at once and stay exactly equal to stepping one by one.

During such a run every sequence of the batch decodes one token per step (a width-1
emission, core/emission.py) until it finishes: sequence i (c_i tokens cached before
step 1, r_i tokens left to generate) takes part in steps 1..r_i and reads c_i + j KV
slots at step j (its context and the new token). A step's shape is then the count n_j of sequences still running and the KV
they read, sum over them of c_i + j. (core/decode_group.py keeps the aggregates.)

With a sliding window W, sequence i also reads min(c_i + j, W) slots of each windowed
layer at step j (as many pairs): the windowed read grows by the number of sequences
still inside the window, and a stretch ends where one of them fills it as well
(window_decode_run; core/decode_window.py keeps those aggregates)."""
from __future__ import annotations

from batchlab.core.cost.form import CostModel
from batchlab.core.features import features_of
from batchlab.core.run_clock import RunClock


class DecodeRun:
    """Steps 1..len(clock) of a run: on `clock` each one's duration and the time it ends
    (core/run_clock.py: clock.time(0) the run's start); its batch sizes by stretch (sizes[i]
    sequences in the steps up to ends[i], from the one after ends[i - 1]); and a step each
    where the caller keeps a step table (rows, decode_run's and window_decode_run's):
    its batch size and KV read, and its windowed KV read (window_read: a windowed model's
    run only, else None). Without rows those lists stay empty: a step table's columns alone
    read them, and a list a step costs objects a step.
    (A plain class: compiled, a dataclass's __init__ stays interpreted.)"""
    __slots__ = ("clock", "sizes", "ends", "num_seqs", "kv_read", "window_read")

    def __init__(self, t0: float = 0.0) -> None:
        self.clock = RunClock(t0)
        self.sizes: list[int] = []
        self.ends: list[int] = []
        self.num_seqs: list[int] = []
        self.kv_read: list[int] = []
        self.window_read: list[int] | None = None

    @property
    def durations(self) -> list[float]:
        return self.clock.durations()

    def sizes_by_step(self) -> list[int]:
        """The batch size of each step, from the stretches."""
        out: list[int] = []
        start = 1
        for i in range(len(self.sizes)):
            n = self.sizes[i]
            for _ in range(start, self.ends[i] + 1):
                out.append(n)
            start = self.ends[i] + 1
        return out


def decode_run(cost: CostModel, n: int, cached: int, stops: list[int], counts: list[int],
               c_sums: list[int], k: int, after_prefill: int = 0, after_idle: int = 0,
               rows: bool = True, t0: float = 0.0) -> DecodeRun:
    """Price steps 1..k of a run of n sequences holding `cached` tokens in all, where
    counts[i] of them, holding c_sums[i] cached tokens, take their last step at stops[i]
    (distinct, ascending, >= 1 and < k), from time t0. Between two finishes the batch size
    is constant and the KV read grows by n a step: a stretch of equal size is one call of
    the cost model's decode_into (which prices it in the cheapest form for its length).
    rows=False: no batch size or KV read a step (run.num_seqs and run.kv_read stay empty)."""
    run = DecodeRun(t0)
    clock, sizes, reads = run.clock, run.num_seqs, run.kv_read
    start, priced = 1, 0  # priced: steps of the stretch priced already
    if after_prefill or after_idle:  # the first priced as stepping prices it: from its own features
        kv = cached + n  # the first step's read: every member's context and token
        clock.add(cost.step_time(features_of(n, 0, 0, n, kv, kv, after_prefill, after_idle, 0, 0, 0, 0, 0)))
        priced = 1
    # Stretch by stretch, steps start..stop; none is empty. (Plain loops: compiled, no
    # range or list per stretch.)
    for i in range(len(stops) + 1):
        stop = stops[i] if i < len(stops) else k
        length = stop - start + 1
        kv0 = cached + start * n
        if length > priced:
            cost.decode_into(clock, n, kv0 + priced * n, length - priced)
        priced = 0
        run.sizes.append(n)
        run.ends.append(stop)
        if rows:
            for j in range(length):
                sizes.append(n)
                reads.append(kv0 + j * n)
        start = stop + 1
        if i < len(stops):  # sequences whose last step is `stop` leave after it
            n, cached = n - counts[i], cached - c_sums[i]
    return run


def window_decode_run(cost: CostModel, n: int, cached: int, open_n: int, open_base: int, tick: int,
                      window: int, changes: list[tuple[int, int, int, int, int]], k: int,
                      after_prefill: int = 0, after_idle: int = 0, t0: float = 0.0,
                      rows: bool = True) -> DecodeRun:
    """decode_run for a model with a sliding window: steps 1..k of a run from `tick` of n
    sequences holding `cached` tokens, open_n of them inside the window (their bases, the
    tokens they held at tick 0, summing to open_base), the rest full. changes, sorted:
    (step, sequences, cached tokens, open sequences, open bases) that leave the sums from
    that step on (2..k): a finish leaves all four, an open sequence that fills the window
    only the open ones. Between changes a stretch is one call of the cost model's
    window_decode_times. rows=False: no rows (run.window_read stays None), as decode_run's."""
    run = DecodeRun(t0)
    durations: list[float] = []
    sizes, reads = run.num_seqs, run.kv_read
    windowed: list[int] = []
    if rows:
        run.window_read = windowed
    first_n, first_kv, first_w = 0, 0, 0  # step 1's, for after_prefill / after_idle
    start, i, count = 1, 0, len(changes)
    while start <= k:
        while i < count and changes[i][0] == start:
            _, dn, dc, do, db = changes[i]
            n, cached, open_n, open_base = n - dn, cached - dc, open_n - do, open_base - db
            i += 1
        stop = changes[i][0] - 1 if i < count else k
        length = stop - start + 1
        kv0 = cached + start * n
        # open sequences read their base + tick + 1 in the step from tick + start - 1
        w0 = open_base + open_n * (tick + start) + (n - open_n) * window
        durations.extend(cost.window_decode_times(n, kv0, w0, open_n, length))
        run.sizes.append(n)
        run.ends.append(stop)
        if start == 1:
            first_n, first_kv, first_w = n, kv0, w0
        if rows:
            for j in range(length):
                sizes.append(n)
                reads.append(kv0 + j * n)
                windowed.append(w0 + j * open_n)
        start = stop + 1
    if after_prefill or after_idle:  # priced as stepping prices it: from its own features
        durations[0] = cost.step_time(features_of(first_n, 0, 0, first_n, first_kv, first_kv,
                                                  after_prefill, after_idle, 0, first_w, first_w, 0, 0))
    run.clock.extend(durations)
    return run
