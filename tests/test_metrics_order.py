"""Figures that do not depend on how the replicas' steps interleave in recording: the
inter-token gaps come back in replica order (each replica's in time order) and the
utilisation totals are integer sums per denominator, divided once. Replicas that are woken less often (sim/simulate.py's
round-robin) record the same steps in another interleaving and must give the same bits."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.batch import Batch
from batchlab.core.features import StepFeatures
from batchlab.core.metrics import MetricsRecorder
from batchlab.core.request import Request, Sequence
from batchlab.core.summary import step_totals

# A replica's steps: (duration, sequences in the step, KV blocks used)
STEPS = st.lists(st.tuples(st.floats(1e-4, 0.3), st.integers(1, 7), st.integers(0, 97)),
                 min_size=1, max_size=12)


def record(streams: list[list[tuple[float, int, int]]], order: list[int], table: bool):
    """Each replica's steps in its own order, the replicas' interleaved as `order` says
    (the i-th time replica r appears, its i-th step)."""
    rec = MetricsRecorder(record_steps=table)
    seqs = [Sequence(Request(r, 0.0, 4, 100)) for r in range(len(streams))]
    clock, step = [0.0] * len(streams), [0] * len(streams)
    for r in order:
        duration, n, used = streams[r][step[r]]
        step[r] += 1
        batch = Batch()
        batch.seqs, batch.num_tokens, batch.starts, batch.sampled = [seqs[r]], [1], [0], [1]
        start, clock[r] = clock[r], clock[r] + duration
        rec.record_step(r, start, clock[r], batch, StepFeatures(num_seqs=n, decode_tokens=n),
                        used, 97, 7)
    return rec


@settings(max_examples=200, deadline=None)
@given(st.lists(STEPS, min_size=1, max_size=4), st.randoms(use_true_random=False), st.booleans())
def test_replicas_give_the_same_bits_however_their_steps_interleave(streams, rng, table):
    in_turn = [r for r, s in enumerate(streams) for _ in s]
    mixed = list(in_turn)
    rng.shuffle(mixed)  # any interleaving keeps each replica's steps in order
    a, b = record(streams, in_turn, table), record(streams, mixed, table)
    (ga, ca), (gb, cb) = a.itl(), b.itl()
    assert np.array_equal(ga, gb) and np.array_equal(ca, cb)
    assert a.totals == b.totals
    if table:
        assert step_totals(a.step_table()) == a.totals  # the table gives the same bits
    assert int(ca.sum()) == sum(len(s) for s in streams) - len(streams)  # every token after the first


def test_totals_are_the_exact_sums_rounded_once():
    """One denominator: the exact sum of the ratios, rounded once (a running float sum
    rounds at every step), and the step table's totals are the same bits."""
    stream = [(0.01 * (k + 1), k % 5 + 1, 3 * k) for k in range(50)]
    rec = record([stream], [0] * len(stream), True)
    assert rec.totals["seat_fraction"] == float(Fraction(sum(n for _, n, _ in stream), 7))
    assert rec.totals["kv_fraction"] == float(Fraction(sum(u for _, _, u in stream), 97))
    assert step_totals(rec.step_table()) == rec.totals


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0, 5), st.floats(1e-4, 0.3), st.integers(1, 7)),
                min_size=1, max_size=40), st.integers(0, 70_000))
def test_the_step_table_is_sorted_by_replica_then_start_as_lexsort_sorts(rows, offset):
    """Whatever order the rows came in (a replica's own out of time order included, where
    the stable sort by replica alone is not enough), and replica indices past 16 bits."""
    rec = MetricsRecorder(record_steps=True)
    for replica, start, duration, n in rows:
        batch = Batch()
        seq = Sequence(Request(replica, 0.0, 4, 100))
        batch.seqs, batch.num_tokens, batch.starts, batch.sampled = [seq], [1], [0], [1]
        rec.record_step(replica + offset, start, start + duration, batch,
                        StepFeatures(num_seqs=n, decode_tokens=n), 0, 97, 7)
    table = rec.step_table()
    replica = np.array([r + offset for r, _, _, _ in rows])
    start = np.array([s for _, s, _, _ in rows])
    order = np.lexsort((start, replica))
    assert np.array_equal(table["replica"], replica[order])
    assert np.array_equal(table["start_s"], start[order])
    assert np.array_equal(table["num_seqs"], np.array([n for *_, n in rows])[order])
