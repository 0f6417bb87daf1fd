"""A step table's fast-forward runs, kept as runs and expanded when the table is read
(core/step_runs.py), against the rows written one by one in recording order, as
record_step writes a stepped row and record_decode_run used to write a run's. The log's
buffer is flushed every few values, so that runs split across flushes are covered."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.metrics import STEP_COLUMNS
from batchlab.core.step_runs import RunLog, with_runs

FLOATS = {"start_s", "duration_s"}


class Run(NamedTuple):
    after: int
    replica: int
    times: list[float]
    num_seqs: list[int]
    kv_read: list[int]
    kv_blocks_used: list[int]
    kv_blocks_total: int
    seats: int
    cached_blocks: int
    after_prefill: int
    after_idle: int


def run_rows(r: Run) -> list[dict]:
    """The run's rows one by one (the old record_decode_run, row by row)."""
    out = []
    for j, n in enumerate(r.num_seqs):
        kv = r.kv_read[j]
        out.append({"replica": r.replica, "start_s": r.times[j], "duration_s": r.times[j + 1] - r.times[j],
                    "num_seqs": n, "num_prefill_seqs": 0, "prefill_tokens": 0, "decode_tokens": n,
                    "kv_tokens_read": kv, "attention_pairs": kv, "num_preempted": 0,
                    "kv_blocks_used": r.kv_blocks_used[j], "kv_blocks_total": r.kv_blocks_total,
                    "seats": r.seats, "cached_blocks": r.cached_blocks,
                    "after_prefill": r.after_prefill if j == 0 else 0,
                    "after_idle": r.after_idle if j == 0 else 0, "masked_pairs": 0,
                    "window_kv_tokens_read": kv, "window_attention_pairs": kv,
                    "prefill_attention_pairs": 0, "prefill_self_pairs": 0})
    return out


@st.composite
def recordings(draw):
    """(stepped rows, the run log, every row in recording order): stepped rows and runs
    interleaved."""
    stepped, rows = [], []
    log = RunLog(flush_every=draw(st.integers(1, 16)))
    clock = draw(st.floats(0, 100))
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.booleans()):
            row = {c: draw(st.integers(0, 2**40)) for c in STEP_COLUMNS}
            dur = draw(st.floats(1e-6, 1.0))
            row["start_s"], row["duration_s"] = clock, dur
            clock += dur
            stepped.append(row)
            rows.append(row)
        else:
            m = draw(st.integers(1, 6))
            times = [clock]
            for _ in range(m):
                times.append(times[-1] + draw(st.floats(1e-6, 1.0)))
            clock = times[-1]
            ints = st.lists(st.integers(0, 2**40), min_size=m, max_size=m)
            r = Run(len(stepped), draw(st.integers(0, 3)), times, draw(ints), draw(ints), draw(ints),
                        draw(st.integers(1, 10**6)), draw(st.integers(1, 1024)), draw(st.integers(0, 10**6)),
                        draw(st.integers(0, 1)), draw(st.integers(0, 1)))
            log.add(*r)
            rows.extend(run_rows(r))
    return stepped, log, rows


@settings(max_examples=200, deadline=None)
@given(recordings())
def test_runs_expand_to_the_rows_written_one_by_one_in_order(rec):
    stepped, log, rows = rec
    cols = {c: np.array([r[c] for r in stepped], dtype=np.float64 if c in FLOATS else np.int64)
            for c in STEP_COLUMNS}
    got = with_runs(cols, log) if log.runs else cols
    for c in STEP_COLUMNS:
        want = np.array([r[c] for r in rows], dtype=np.float64 if c in FLOATS else np.int64)
        assert got[c].dtype == want.dtype and got[c].tolist() == want.tolist(), c
