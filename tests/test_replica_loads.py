"""least_loaded's choice kept on a board (sim/replica_loads.py) is the scan's: the least
(load, index) over every replica, read as Replica.load reads it, at every instant; and a
pending run's load stays put exactly until PendingRun.steady_until says."""
from __future__ import annotations

import math

import numpy as np
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.batch import Batch
from batchlab.core.fast_forward import DecodeRun
from batchlab.sim.pending_run import PendingRun
from batchlab.sim.replica_loads import LoadBoard


@st.composite
def pending_runs(draw, start: float = 0.0):
    """A run of 2-12 steps from `start` (some of equal length), its members finishing
    along it (sizes only fall), cut-able from sensitive_from, ending at last."""
    k = draw(st.integers(2, 12))
    durations = draw(st.lists(st.sampled_from([0.25, 0.5, 1.0]), min_size=k, max_size=k))
    sizes = sorted(draw(st.lists(st.integers(1, 6), min_size=k, max_size=k)), reverse=True)
    run = DecodeRun(start)
    run.clock.extend(durations)
    run.num_seqs = sizes
    sensitive_from = draw(st.integers(1, k))
    last = draw(st.integers(max(2, sensitive_from - 1), k))
    return PendingRun(Batch(), run, (0, 0), sensitive_from, last)


@given(pending_runs(), st.floats(0.01, 14.0))
def test_a_pending_runs_load_stays_put_until_steady_until(p, t):
    until = p.steady_until(t)
    assert until >= t
    ahead = [t + x for x in np.linspace(0.0, 1.0, 41) * ((until if until < math.inf else 20.0) - t)]
    assert all(p.finished_before(x) == p.finished_before(t) for x in ahead)
    if until < math.inf:  # and moves just after it
        assert p.finished_before(math.nextafter(until, math.inf)) != p.finished_before(t)


@st.composite
def histories(draw):
    """Replicas numbered in any order, and a history of changes (outstanding requests, a
    pending run from the instant or none) between reads at times that only go on."""
    n = draw(st.integers(1, 6))
    indices = draw(st.permutations(list(range(10, 10 + n))))
    steps, now = [], 0.01
    for _ in range(draw(st.integers(1, 40))):
        now += draw(st.sampled_from([0.0, 0.1, 0.3, 1.0, 2.5]))
        changes = []
        for _ in range(draw(st.integers(0, 3))):
            pending = draw(st.none() | pending_runs(start=now - draw(st.sampled_from([0.0, 0.2, 1.0]))))
            changes.append((draw(st.integers(0, n - 1)), draw(st.integers(0, 12)), pending))
        steps.append((now, changes))
    return indices, steps


@settings(max_examples=300, deadline=None)
@given(histories())
def test_the_board_chooses_as_the_scan_does(history):
    indices, steps = history
    n = len(indices)
    board = LoadBoard(simpy.Environment(), indices)
    outstanding, pending = [0] * n, [None] * n
    for now, changes in steps:
        for pos, out, run in changes:
            # A run's members are among the outstanding (Replica.load never goes negative).
            out = max(out, run.run.num_seqs[0]) if run is not None else out
            outstanding[pos], pending[pos] = out, run
            board.changed(pos, out, run)
        loads = [outstanding[p] - (pending[p].finished_before(now) if pending[p] is not None else 0)
                 for p in range(n)]
        want = min(range(n), key=lambda p: (loads[p], indices[p]))
        assert board.least(now) == want, (now, loads)
