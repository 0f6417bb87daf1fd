"""The two tables every run produces, identical in schema for sim and real runs:
one row per request, one row per engine step. Token times are stamped here, from the
step that produced each token, so both worlds measure latency the same way.

Everything is kept in typed arrays, never as per-token Python objects. Inter-token gaps
are stored as (gap, count) pairs: all sequences of a step whose previous token came from
the step before share one gap, so a step adds one pair, not one value per sequence.
Without a step table (record_steps=False, for very long replays) only the totals the
summary needs are kept, and the gaps are folded into a fixed-size histogram (0.005%
resolution, core/gap_fold.py): memory then grows with the request rows alone."""
from __future__ import annotations

from array import array
from typing import Iterable

import numpy as np

from batchlab.core.batch import Batch
from batchlab.core.columns import extend
from batchlab.core.features import StepFeatures
from batchlab.core.gap_fold import GapFold
from batchlab.core.gap_histogram import GapHistogram
from batchlab.core.request import Sequence
from batchlab.core.fast_forward import DecodeRun
from batchlab.core.step_runs import RunLog, add_chunk, joined, with_runs
from batchlab.core.summary import StepSums

REQUEST_COLUMNS = ("request_id", "replica", "arrival_s", "prompt_len", "output_len", "priority",
                   "first_scheduled_s", "first_token_s", "finish_s", "preemptions", "status",
                   "reject_reason", "cached_tokens")
STEP_COLUMNS = ("replica", "start_s", "duration_s", "num_seqs", "num_prefill_seqs",
                "prefill_tokens", "decode_tokens", "kv_tokens_read", "attention_pairs",
                "num_preempted", "kv_blocks_used", "kv_blocks_total", "seats",
                "cached_blocks", "after_prefill", "after_idle", "masked_pairs",
                "window_kv_tokens_read", "window_attention_pairs", "prefill_attention_pairs",
                "prefill_self_pairs")
_FLOAT = {"arrival_s", "first_scheduled_s", "first_token_s", "finish_s", "start_s", "duration_s"}
_TEXT = {"status", "reject_reason"}
ROWS_EVERY = 4096  # request and step rows buffered in lists before they go into the typed columns


def _column(name: str) -> array | list:
    return [] if name in _TEXT else array("d" if name in _FLOAT else "q")


class MetricsRecorder:
    def __init__(self, record_steps: bool = True) -> None:
        self.record_steps = record_steps  # a step table (else totals and a gap histogram)
        self._req = {c: _column(c) for c in REQUEST_COLUMNS}
        # Rows wait in plain lists, a column each (REQUEST_COLUMNS' order), and go into the
        # typed columns ROWS_EVERY at a time: compiled, a list append is a C call, where
        # an array's append is a call through Python per field and request.
        self._pending: list[list] = [[] for _ in REQUEST_COLUMNS]
        # The step table's columns, each a list of chunks (a typed array a flush, as
        # core/step_runs.py keeps a run's): a column grown at every flush was copied whole
        # wherever it could not grow in place. _stepped: the rows flushed so far.
        self._step: dict[str, list[array]] | None = (
            {c: [] for c in STEP_COLUMNS} if record_steps else None)
        self._stepped = 0
        self._step_pending: list[list] = [[] for _ in STEP_COLUMNS]  # stepped rows, as _pending
        self._runs = RunLog()  # fast-forward runs' rows, kept as runs (core/step_runs.py)
        # Running totals over steps: what the summary needs when there is no step table
        # (typed: compiled, a dict of floats would make the counts floats).
        # The fractions' numerators, summed exactly as integers per denominator (seats, KV
        # blocks), so the totals depend neither on how the replicas' steps interleave in
        # recording nor on where fast-forward runs were cut.
        self._num_steps = 0
        self._seated: dict[int, int] = {}  # seats -> sequences summed over steps
        self._kv_used: dict[int, int] = {}  # KV blocks in all -> blocks used summed over steps
        # The latest keys and what they gained since, in fields until a key changes or the
        # sums are read (_settle): compiled, a dict update boxes its key and value.
        self._holding = False
        self._seats_key = self._blocks_key = self._seated_since = self._used_since = 0
        self._preemptions = 0
        self.decisions = 0  # engine iterations recorded: a step, or a fast-forward run
        self.itl_gap = array("d")  # inter-token gaps, seconds ...
        self.itl_count = array("q")  # ... and how many tokens had each
        # Where each replica's run of gaps starts in itl_gap (step table only): itl() puts
        # them in replica order, each replica's in time order, however they interleaved.
        self._gap_replica = array("q")
        self._gap_start = array("q")
        self._gap_last = -1  # _gap_replica's last entry, in a field (-1: none; replicas count from 0)
        self._folded: GapFold | None = None if record_steps else GapFold()  # gaps without a step table

    @property
    def totals(self) -> dict[str, int | float]:
        """num_steps, seat_fraction and kv_fraction (summed over steps), preemptions."""
        return self.step_sums().totals

    def step_sums(self) -> StepSums:
        """The exact sums behind totals, which recorders of disjoint replicas add."""
        self._settle()
        return StepSums(self._num_steps, dict(self._seated), dict(self._kv_used), self._preemptions)

    def _sums(self, seats: int, seated: int, blocks: int, used: int) -> None:
        """Add `seated` sequences to the seats' sum and `used` to the KV blocks' sum."""
        if seats != self._seats_key or blocks != self._blocks_key or not self._holding:
            self._settle()
            self._seats_key, self._blocks_key, self._holding = seats, blocks, True
        self._seated_since += seated
        self._used_since += used

    def _settle(self) -> None:  # the dicts keep their keys' first-seen order
        if self._holding:
            k, j = self._seats_key, self._blocks_key
            self._seated[k] = self._seated.get(k, 0) + self._seated_since
            self._kv_used[j] = self._kv_used.get(j, 0) + self._used_since
            self._holding = False
            self._seated_since = self._used_since = 0

    def _pair(self, gap: float, count: int) -> None:  # `count` tokens came `gap` after their last
        folded = self._folded
        if folded is None:
            self.itl_gap.append(gap)
            self.itl_count.append(count)
        else:
            folded.pair(gap, count)

    def _replica(self, replica: int) -> None:
        """Note that `replica`'s gaps follow (before any are recorded)."""
        if self._folded is None and self._gap_last != replica:
            self._gap_last = replica
            self._gap_replica.append(replica)
            self._gap_start.append(len(self.itl_gap))

    def record_step(self, replica: int, start: float, end: float, batch: Batch,
                    features: StepFeatures, kv_blocks_used: int, kv_blocks_total: int,
                    seats: int, cached_blocks: int = 0) -> None:
        """Call after Scheduler.complete (it sets batch.sampled: tokens each item
        emitted, core/emission.py). Tokens are stamped
        `end` exactly (not start + duration), so the next step's start matches them.
        kv_blocks_used and cached_blocks (blocks holding a cached prefix, in use or
        not) as they stood when the step was formed."""
        seqs, b = batch.seqs, batch.bulk_decodes
        self._replica(replica)
        if batch.group_decodes:
            self._group_gaps(start, end, batch)
        if b:  # bulk decodes: every one sampled and has a previous token
            self._gaps_after(start, end, [s.last_token for s in seqs[:b]])
            for seq in seqs[:b]:
                seq.last_token = end
        for i in range(b, len(seqs)):
            emitted = batch.sampled[i]
            if emitted:
                seq = seqs[i]
                if seq.first_token < 0:
                    seq.first_token = end
                else:
                    self._pair(end - seq.last_token, 1)
                if emitted > 1:  # the rest arrived with it: gaps of 0, as a client sees them
                    self._pair(0.0, emitted - 1)
                seq.last_token = end
        self._maybe_fold()
        self._num_steps += 1
        self.decisions += 1
        self._sums(seats, features.num_seqs, kv_blocks_total, kv_blocks_used)
        self._preemptions += len(batch.preempted)
        if self._step is not None:
            # object: compiled, a tuple of ints and floats would iterate as floats
            row: tuple[object, ...] = (replica, start, end - start, features.num_seqs, features.num_prefill_seqs,
                   features.prefill_tokens, features.decode_tokens, features.kv_tokens_read,
                   features.attention_pairs, len(batch.preempted), kv_blocks_used,
                   kv_blocks_total, seats, cached_blocks, features.after_prefill,
                   features.after_idle, features.masked_pairs, features.window_kv_tokens_read,
                   features.window_attention_pairs, features.prefill_attention_pairs,
                   features.prefill_self_pairs)
            pending = self._step_pending
            for col, value in zip(pending, row):
                col.append(value)
            if len(pending[0]) >= ROWS_EVERY:
                self._flush_steps()

    def _gaps_after(self, start: float, end: float, last: list[float], also: int = 0) -> None:
        """Gaps of tokens stamped `end` whose previous tokens came at `last` (and of
        `also` more whose previous token came at `start`): the ones from the step that
        ended at `start` (most) share a single pair."""
        same = last.count(start) + also
        if same:
            self._pair(end - start, same)
        if same - also < len(last):
            other = [end - t for t in last if t != start]
            folded = self._folded
            if folded is None:
                self.itl_gap.fromlist(other)  # fromlist: twice as fast as extend from a list
                self.itl_count.fromlist([1] * len(other))
            else:
                folded.ones(other)

    def _group_gaps(self, start: float, end: float, batch: Batch) -> None:
        """Gaps of the decode group's tokens stamped `end` (core/decode_group.py): the
        members that took part in the group's last step share its token time."""
        group, fresh = batch.group, batch.group_fresh
        assert group is not None  # a batch with group decodes names its group
        old = batch.group_decodes - len(fresh)
        if old and group.last != start:
            self._pair(end - group.last, old)
            old = 0
        self._gaps_after(start, end, [s.last_token for s in fresh], old)
        group.last = end

    def record_decode_run(self, replica: int, run: DecodeRun, m: int, kv_blocks_used: list[int],
                          kv_blocks_total: int, seats: int, batch: Batch, cached_blocks: int = 0,
                          context: tuple[int, int] = (0, 0)) -> None:
        """Steps 1..m of a run of the decode group's decode-only steps at once
        (core/fast_forward.py), the first one `batch` (see core/decode_group.py): step j
        ran from clock.time(j - 1) to clock.time(j) (a run neither caches nor evicts:
        cached_blocks holds); context: the first step's (after_prefill, after_idle), the
        later ones follow a decode. kv_blocks_used: a step each, or without a step table
        their sum alone; with one, the run has its lists a step (num_seqs, kv_read and a
        windowed model's window_read). The same rows, gaps, totals and token stamps as m
        calls of record_step."""
        clock = run.clock
        self._replica(replica)
        self._group_gaps(clock.time(0), clock.time(1), batch)
        group = batch.group
        assert group is not None
        group.last = clock.time(m)
        # Steps 2..m's gaps, of those in the step before (all of the step's members), and
        # the members summed over steps 1..m, stretch by stretch (steps start..stop).
        seat_steps, start = 0, 1
        folded = self._folded
        if m > 1:
            gaps = clock.gaps(1, m)
            if folded is not None:  # folded later: no object a gap
                folded.run_gaps(gaps, m - 1)
            else:
                self.itl_gap.frombytes(gaps)
        for i in range(len(run.sizes)):
            n, stop = run.sizes[i], run.ends[i]
            if stop > m:
                stop = m
            seat_steps += n * (stop - start + 1)
            first = 2 if start < 2 else start
            if stop >= first:
                if folded is not None:
                    folded.run_sizes(n, stop - first + 1)
                else:
                    self.itl_count.fromlist([n] * (stop - first + 1))
            if stop == m:
                break
            start = stop + 1
        self._maybe_fold()
        self._num_steps += m
        self.decisions += 1
        kv_steps = 0
        for used in kv_blocks_used:  # compiled: sum() over a list is a call through Python
            kv_steps += used
        self._sums(seats, seat_steps, kv_blocks_total, kv_steps)
        if self._step is not None:  # after the stepped rows recorded so far, flushed or not
            stepped = self._stepped + len(self._step_pending[0])
            window = run.window_read
            self._runs.add(stepped, replica, clock.times(0, m + 1), run.num_seqs[:m], run.kv_read[:m],
                           kv_blocks_used, kv_blocks_total, seats, cached_blocks, context[0], context[1],
                           window[:m] if window is not None else None)

    def record_requests(self, seqs: list[Sequence], replica: int) -> None:
        """Rows for finished, rejected or (at the end of an interrupted run) unfinished
        ones, as they stand now."""
        (ids, replicas, arrivals, prompts, outputs, priorities, scheduled, first, finish,
         preemptions, status, reasons, cached) = self._pending
        for seq in seqs:
            r = seq.request
            ids.append(r.id)
            replicas.append(replica)
            arrivals.append(r.arrival)
            prompts.append(r.prompt_len)
            outputs.append(r.output_len)
            priorities.append(r.priority)
            scheduled.append(seq.first_scheduled)
            first.append(seq.first_token)
            finish.append(seq.finish)
            preemptions.append(seq.preemptions)
            status.append(seq.status._value_)  # .value is a descriptor run in Python
            reasons.append(seq.reject_reason)
            cached.append(seq.cached_tokens)
        if len(ids) >= ROWS_EVERY:
            self._flush_rows()

    def _flush_rows(self) -> None:
        if self._pending[0]:
            _move_rows(self._req.values(), self._pending)
            self._pending = [[] for _ in REQUEST_COLUMNS]

    def _flush_steps(self) -> None:
        if self._step is not None and self._step_pending[0]:
            self._stepped += len(self._step_pending[0])
            for c, rows in zip(STEP_COLUMNS, self._step_pending):
                add_chunk(self._step[c], "d" if c in _FLOAT else "q", rows)
            self._step_pending = [[] for _ in STEP_COLUMNS]

    @property
    def num_requests(self) -> int:
        return len(self._req["request_id"]) + len(self._pending[0])

    @property
    def num_steps(self) -> int:
        return self._num_steps

    def request_table(self, release: bool = False) -> dict[str, np.ndarray]:
        """Columns as arrays, sorted by request id; unset times are NaN. (Built a column
        at a time, so that a replay of millions of requests peaks at about twice its
        rows, not four times.) release: the recorder lets each column go once copied
        (it keeps no rows after), so that the peak is the table and one column."""
        self._flush_rows()
        order = np.argsort(_view(self._req["request_id"]), kind="stable")
        t = {}
        for c in list(self._req):
            # Gathered from a view of the typed column: a copy first doubled the fresh
            # memory (at 5M rows, faulting in the pages was most of the table's time).
            col = np.take(_view(self._req[c]), order)
            if release:
                self._req[c] = _column(c)
            if c in ("first_scheduled_s", "first_token_s", "finish_s"):
                col[col < 0] = np.nan
            t[c] = col
        return t

    def step_table(self) -> dict[str, np.ndarray] | None:
        """Columns as arrays, by replica, then in time order (None: not recorded)."""
        if self._step is None:
            return None
        self._flush_steps()
        t = {c: joined(v, np.float64 if c in _FLOAT else np.int64) for c, v in self._step.items()}
        if self._runs.runs:
            t = with_runs(t, self._runs)
        replica, start = t["replica"], t["start_s"]
        if _in_order(replica, start):  # one replica records in time order: nothing to sort
            return t
        # Each replica records its rows in time order, so a stable sort by replica alone is
        # lexsort((start, replica)): on a 16-bit key numpy sorts by radix, where lexsort
        # merges int64 keys and floats. Checked after; lexsort where it did not hold.
        order = np.argsort(_small_key(replica), kind="stable")
        if not _in_order(replica[order], start[order]):
            order = np.lexsort((start, replica))
        return {c: np.take(v, order) for c, v in t.items()}  # take: a quarter faster than v[order]

    def _maybe_fold(self) -> None:
        if self._folded is not None:
            self._folded.maybe_fold()

    def gap_histogram(self) -> GapHistogram | None:
        """Every gap folded into the histogram (None: a step table keeps them exactly)."""
        if self._folded is None:
            return None
        self._folded.fold()
        return self._folded.hist

    def itl(self) -> tuple[np.ndarray, np.ndarray]:
        """(gaps, counts): counts[i] tokens came gaps[i] seconds after their previous one
        (without a step table: gaps to 0.005%, from the histogram)."""
        if self._folded is None:
            gaps, counts = _np(self.itl_gap), _np(self.itl_count)
            replicas, starts = _np(self._gap_replica), _np(self._gap_start)
            if not len(replicas) or (replicas[1:] > replicas[:-1]).all():
                return gaps, counts  # one replica, or replicas that never interleaved
            # Each gap's replica, then a stable sort by it: replica order, time order within
            # (a 16-bit key: numpy sorts it by radix).
            lengths = np.diff(np.append(starts, len(gaps)))
            order = np.argsort(np.repeat(_small_key(replicas), lengths), kind="stable")
            return np.take(gaps, order), np.take(counts, order)
        hist = self.gap_histogram()
        assert hist is not None
        return hist.pairs()


def _in_order(replica: np.ndarray, start: np.ndarray) -> bool:
    """Rows by replica, then by start (ties in any order)."""
    later = replica[1:] - replica[:-1]
    return bool(((later > 0) | ((later == 0) & (start[1:] >= start[:-1]))).all())


def _small_key(replica: np.ndarray) -> np.ndarray:
    """Replica indices as the narrowest unsigned key that holds them: numpy's stable
    sort is a radix sort for 16 bits or less (timsort for int64); the same order."""
    if len(replica) and 0 <= replica.min() and replica.max() < 1 << 16:
        return replica.astype(np.uint16)
    return replica


def _move_rows(columns: Iterable[array | list], pending: list[list]) -> None:
    """Buffered rows, a list per column, onto the columns (text columns are lists)."""
    for col, rows in zip(columns, pending):
        if isinstance(col, list):
            col.extend(rows)
        else:
            extend(col, rows)


def _view(col: array | list) -> np.ndarray:
    """A typed column's numpy view (no copy; the column must not grow while it is held),
    or a text column as _np copies it."""
    if isinstance(col, list):
        return _np(col)
    return np.frombuffer(col, dtype=np.float64 if col.typecode == "d" else np.int64)


def _np(col: array | list) -> np.ndarray:
    """A copy as a numpy array (text columns as object arrays of str: a fixed-width
    str array would spend the longest reject reason's width on every row)."""
    if isinstance(col, list):
        return np.array(col, dtype=object)
    return np.array(col, dtype=np.float64 if col.typecode == "d" else np.int64)
