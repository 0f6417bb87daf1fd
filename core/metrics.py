"""The two tables every run produces, identical in schema for sim and real runs:
one row per request, one row per engine step. Token times are stamped here, from the
step that produced each token, so both worlds measure latency the same way."""
from __future__ import annotations

from array import array

import numpy as np

from core.batch import Batch, StepFeatures
from core.request import Sequence

REQUEST_COLUMNS = ("request_id", "replica", "arrival_s", "prompt_len", "output_len", "priority",
                   "first_scheduled_s", "first_token_s", "finish_s", "preemptions", "status",
                   "reject_reason")
STEP_COLUMNS = ("replica", "start_s", "duration_s", "num_seqs", "num_prefill_seqs",
                "prefill_tokens", "decode_tokens", "kv_tokens_read", "attention_pairs",
                "num_preempted", "kv_blocks_used", "kv_blocks_total", "seats")
_STEP_FLOAT = {"start_s", "duration_s"}


class MetricsRecorder:
    def __init__(self) -> None:
        self._req: dict[str, list] = {c: [] for c in REQUEST_COLUMNS}
        self._step: dict[str, array] = {c: array("d" if c in _STEP_FLOAT else "q") for c in STEP_COLUMNS}
        self.itl = array("d")  # every inter-token gap, seconds

    def record_step(self, replica: int, start: float, duration: float, batch: Batch,
                    features: StepFeatures, kv_blocks_used: int, kv_blocks_total: int,
                    seats: int) -> None:
        """Call after Scheduler.complete (it sets batch.sampled)."""
        end = start + duration
        itl = self.itl
        for seq, sampled in zip(batch.seqs, batch.sampled):
            if sampled:
                if seq.first_token < 0:
                    seq.first_token = end
                else:
                    itl.append(end - seq.last_token)
                seq.last_token = end
        row = (replica, start, duration, features.num_seqs, features.num_prefill_seqs,
               features.prefill_tokens, features.decode_tokens, features.kv_tokens_read,
               features.attention_pairs, len(batch.preempted), kv_blocks_used,
               kv_blocks_total, seats)
        for col, value in zip(self._step.values(), row):
            col.append(value)

    def record_decode_run(self, replica: int, starts: np.ndarray, ends: np.ndarray,
                          first: StepFeatures, kv_blocks_used: np.ndarray, kv_blocks_total: int,
                          seats: int, last_token: np.ndarray) -> None:
        """Rows of m steady decode steps at once (see core/fast_forward.py): the same
        rows, and the same inter-token gaps, as m calls of record_step."""
        m, n = len(starts), first.num_seqs
        grow = np.arange(m, dtype=np.int64) * n
        cols = {
            "replica": np.full(m, replica), "start_s": starts, "duration_s": ends - starts,
            "num_seqs": np.full(m, n), "num_prefill_seqs": np.zeros(m, np.int64),
            "prefill_tokens": np.zeros(m, np.int64), "decode_tokens": np.full(m, n),
            "kv_tokens_read": first.kv_tokens_read + grow,
            "attention_pairs": first.attention_pairs + grow,
            "num_preempted": np.zeros(m, np.int64), "kv_blocks_used": kv_blocks_used,
            "kv_blocks_total": np.full(m, kv_blocks_total), "seats": np.full(m, seats),
        }
        for c, col in self._step.items():
            dtype = np.float64 if col.typecode == "d" else np.int64
            col.frombytes(np.ascontiguousarray(cols[c], dtype=dtype).tobytes())
        # Each sequence's first gap runs from its previous token; then one per step.
        gaps = np.concatenate((ends[0] - last_token, np.tile(np.diff(ends), n)))
        self.itl.frombytes(gaps.tobytes())

    def record_requests(self, seqs: list[Sequence], replica: int) -> None:
        """Rows for finished, rejected or (at the end of an interrupted run) unfinished ones."""
        cols = self._req
        for seq in seqs:
            r = seq.request
            row = (r.id, replica, r.arrival, r.prompt_len, r.output_len, r.priority,
                   seq.first_scheduled, seq.first_token, seq.finish, seq.preemptions,
                   seq.status.value, seq.reject_reason)
            for c, v in zip(REQUEST_COLUMNS, row):
                cols[c].append(v)

    @property
    def num_requests(self) -> int:
        return len(self._req["request_id"])

    @property
    def num_steps(self) -> int:
        return len(self._step["start_s"])

    def request_table(self) -> dict[str, np.ndarray]:
        """Columns as arrays, sorted by request id; unset times are NaN."""
        t = {c: np.asarray(v) for c, v in self._req.items()}
        for c in ("first_scheduled_s", "first_token_s", "finish_s"):
            col = t[c].astype(float) if len(t[c]) else np.zeros(0)
            col[col < 0] = np.nan
            t[c] = col
        order = np.argsort(t["request_id"], kind="stable")
        return {c: v[order] for c, v in t.items()}

    def step_table(self) -> dict[str, np.ndarray]:
        """Columns as arrays, by replica, then in time order."""
        t = {c: np.frombuffer(v, dtype=np.float64 if v.typecode == "d" else np.int64)
             for c, v in self._step.items()}
        order = np.lexsort((t["start_s"], t["replica"]))
        return {c: v[order] for c, v in t.items()}

