"""A step table's fast-forward runs, kept as runs while the simulation records them and
expanded into rows once, when the table is read.

A run of m grouped decode steps (core/decode_group.py) has four values that vary by step
(its clock, batch size, KV read, KV blocks in use) and seventeen that are constant or
copies of those; writing all 21 columns row by row cost more than pricing the run. A
RunLog keeps every run's values end to end in typed columns, with where each run fell
among the stepped rows; `with_runs` builds the same rows, in the same order, with a few
numpy calls. Typed columns, not an object and four lists a run: those are containers the
garbage collector walks at every collection while the simulation runs, and again when
the simulation's objects are freed."""
from __future__ import annotations

from array import array

import numpy as np

from batchlab.core.columns import extend

# Each run's constants, one value a run (after: the stepped rows recorded before it; its
# rows come after them; steps: m; after_prefill / after_idle: its first step's, the
# later ones follow a decode) ...
RUN_FIELDS = ("after", "replica", "steps", "kv_blocks_total", "seats", "cached_blocks",
              "after_prefill", "after_idle", "windowed")
# ... and what varies by step, m values a run (times has m + 1: step j of a run ran from
# its times[j - 1] to times[j]).
STEP_FIELDS = ("num_seqs", "kv_read", "kv_blocks_used")
# ... and a windowed model's runs (windowed: 1) their windowed KV reads, m values a run
# (a window-free model's equal its KV reads: not kept).


class RunLog:
    """Every run's values, buffered in lists (compiled, a list's append and extend are C
    calls, an array's are calls through Python) and moved into typed columns
    `flush_every` step times at a time. A column is a list of chunks, a typed array a
    flush: one array grown at every flush is copied whole wherever it cannot grow in
    place, which among many replicas' allocations was most flushes."""

    def __init__(self, flush_every: int = 4096) -> None:
        self.flush_every = flush_every
        self.runs = 0
        self.per_run: list[list[array]] = [[] for _ in RUN_FIELDS]
        self.times: list[array] = []
        self.per_step: list[list[array]] = [[] for _ in STEP_FIELDS]
        self._per_run: list[list[int]] = [[] for _ in RUN_FIELDS]
        self._times: list[float] = []
        self._per_step: list[list[int]] = [[] for _ in STEP_FIELDS]
        self.window_read: list[array] = []
        self._window_read: list[int] = []

    def add(self, after: int, replica: int, times: list[float], num_seqs: list[int], kv_read: list[int],
            kv_blocks_used: list[int], kv_blocks_total: int, seats: int, cached_blocks: int,
            after_prefill: int, after_idle: int, window_read: list[int] | None = None) -> None:
        r = self._per_run
        r[0].append(after)
        r[1].append(replica)
        r[2].append(len(num_seqs))
        r[3].append(kv_blocks_total)
        r[4].append(seats)
        r[5].append(cached_blocks)
        r[6].append(after_prefill)
        r[7].append(after_idle)
        if window_read is None:
            r[8].append(0)
        else:
            r[8].append(1)
            self._window_read.extend(window_read)
        self._times.extend(times)
        s = self._per_step
        s[0].extend(num_seqs)
        s[1].extend(kv_read)
        s[2].extend(kv_blocks_used)
        self.runs += 1
        if len(self._times) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        for col, values in zip(self.per_run, self._per_run):
            add_chunk(col, "q", values)
        add_chunk(self.times, "d", self._times)
        for col, values in zip(self.per_step, self._per_step):
            add_chunk(col, "q", values)
        add_chunk(self.window_read, "q", self._window_read)
        self._per_run = [[] for _ in RUN_FIELDS]
        self._times = []
        self._per_step = [[] for _ in STEP_FIELDS]
        self._window_read = []


def add_chunk(col: list[array], typecode: str, values: list) -> None:
    """values onto a column kept in chunks, as a chunk of their own."""
    if values:
        chunk = array(typecode)
        extend(chunk, values)
        col.append(chunk)


def joined(col: list[array], dtype: type) -> np.ndarray:
    """A column kept in chunks, as one numpy array (a copy: the chunks stay the log's)."""
    if not col:
        return np.empty(0, dtype)
    return np.concatenate([np.frombuffer(c, dtype=dtype) for c in col])


def _ints(col: list[array]) -> np.ndarray:
    return joined(col, np.int64)


def with_runs(stepped: dict[str, np.ndarray], log: RunLog) -> dict[str, np.ndarray]:
    """The step table's columns (stepped: the stepped rows, in recording order), with the
    runs' rows in the places they were recorded, as record_step would have written them."""
    log.flush()
    after, replica, lens, kv_total, seats, cached, after_prefill, after_idle, windowed = (
        _ints(c) for c in log.per_run)
    num_seqs, kv, kv_used = (_ints(c) for c in log.per_step)
    window = kv  # a window-free model's windowed reads are its reads
    if windowed.any():
        window = kv.copy()
        window[np.repeat(windowed.astype(bool), lens)] = _ints(log.window_read)
    times = joined(log.times, np.float64)
    ends = np.cumsum(lens)  # past each run's last row
    n = int(ends[-1])
    step = np.ones(len(times), bool)  # a time that starts a step (each run's last ends one)
    step[ends + np.arange(len(lens))] = False  # run i's times end at ends[i] + i
    first = ends - lens  # each run's first row

    def at_first(values: np.ndarray) -> np.ndarray:
        col = np.zeros(n, dtype=np.int64)
        col[first] = values
        return col
    zeros = np.zeros(n, dtype=np.int64)
    rows = {"replica": np.repeat(replica, lens), "start_s": times[step],
            "duration_s": (times[1:] - times[:-1])[step[:-1]], "num_seqs": num_seqs,
            "num_prefill_seqs": zeros, "prefill_tokens": zeros, "decode_tokens": num_seqs,
            "kv_tokens_read": kv, "attention_pairs": kv, "num_preempted": zeros,
            "kv_blocks_used": kv_used, "kv_blocks_total": np.repeat(kv_total, lens),
            "seats": np.repeat(seats, lens), "cached_blocks": np.repeat(cached, lens),
            "after_prefill": at_first(after_prefill), "after_idle": at_first(after_idle),
            "masked_pairs": zeros,
            # a decode reads as many pairs as KV slots, windowed or not
            "window_kv_tokens_read": window, "window_attention_pairs": window,
            "prefill_attention_pairs": zeros, "prefill_self_pairs": zeros}
    assert rows.keys() == stepped.keys(), "step_runs: the step table's columns changed"
    # Recording order: a run recorded after a stepped rows comes before stepped row a
    # (runs are recorded in order, so `after` never decreases). Stepped row i lands after
    # i stepped rows and every run row recorded before it; the runs' rows fill the rest,
    # in order: two scatters a column, not a sort.
    k = len(stepped["start_s"])
    runs_before = np.searchsorted(after, np.arange(k), side="right")
    at = np.arange(k) + np.concatenate(([0], ends))[runs_before]
    is_run = np.ones(k + n, bool)
    is_run[at] = False
    out = {}
    for c, col in stepped.items():
        merged = np.empty(k + n, dtype=col.dtype)
        merged[at] = col
        merged[is_run] = rows[c]
        out[c] = merged
    return out
