"""The stable/overloaded verdict on request tables of known queues."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.stability import mean_queue, queue_stability


def _table(arrival, scheduled):
    n = len(arrival)
    return {"arrival_s": np.asarray(arrival, float), "first_scheduled_s": np.asarray(scheduled, float),
            "finish_s": np.asarray(scheduled, float) + 0.5, "status": np.array(["finished"] * n, dtype=object)}


def _single_server(rate: float, service: float, n: int = 2000, seed: int = 0):
    """FIFO single server with Poisson arrivals and fixed service time."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1 / rate, n))
    start, free = np.empty(n), 0.0
    for i, a in enumerate(arrival):
        start[i] = max(a, free)
        free = start[i] + service
    return _table(arrival, start)


def test_mean_queue_counts_waiting_time():
    # two requests wait 1 s and 3 s inside a 4 s window: mean queue 1
    assert mean_queue(np.array([0.0, 1.0]), np.array([1.0, 4.0]), 0.0, 4.0) == 1.0


def test_below_capacity_is_stable():
    for seed in range(5):
        assert queue_stability(_single_server(rate=0.8, service=1.0, seed=seed)).stable


def test_above_capacity_is_overloaded():
    for seed in range(5):
        s = queue_stability(_single_server(rate=1.3, service=1.0, seed=seed))
        assert s.verdict == "overloaded", s


def test_rejected_requests_do_not_queue():
    t = _single_server(rate=1.3, service=1.0)
    t["status"][:] = "rejected"
    assert queue_stability(t).stable


def test_never_scheduled_requests_count_as_queued():
    arrival = np.linspace(0, 100, 400)
    scheduled = arrival.copy()
    scheduled[200:] = np.nan  # the second half never got a seat
    assert not queue_stability(_table(arrival, scheduled)).stable


def _reference(table):
    """queue_stability as first written: every quarter's mean over the whole columns."""
    keep = table["status"] != "rejected"
    arrival = np.asarray(table["arrival_s"], float)[keep]
    scheduled = np.asarray(table["first_scheduled_s"], float)[keep].copy()
    times = np.concatenate([arrival, scheduled[np.isfinite(scheduled)], table["finish_s"][keep]])
    scheduled[~np.isfinite(scheduled)] = float(np.nanmax(times))
    edges = np.linspace(arrival.min(), arrival.max(), 5)
    return tuple(mean_queue(arrival, scheduled, lo, hi) for lo, hi in zip(edges, edges[1:]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 50), st.floats(0, 30), st.sampled_from(["finished", "rejected", "never"])),
                min_size=4, max_size=300),
       st.booleans(), st.sampled_from([1, 5000, 20000]))
def test_quarters_are_the_whole_columns_means_to_the_bit(rows, in_order, repeat):
    # Arrivals in time order (a simulated run's table) take the shortcut; any order must not.
    gaps, waits, status = (np.array(c) for c in zip(*rows))
    arrival = np.cumsum(gaps) if in_order else gaps
    scheduled = np.where(status == "never", np.nan, arrival + waits)
    table = {"arrival_s": np.tile(arrival, repeat) if not in_order else
             np.concatenate([arrival + k * arrival[-1] for k in range(repeat)]),
             "first_scheduled_s": None, "finish_s": None, "status": np.tile(status.astype(object), repeat)}
    table["first_scheduled_s"] = table["arrival_s"] + np.tile(scheduled - arrival, repeat)
    table["finish_s"] = table["first_scheduled_s"] + 0.5
    kept = table["status"] != "rejected"
    if kept.sum() < 4 or np.ptp(table["arrival_s"][kept]) == 0:
        return
    got = queue_stability(table).queue_by_quarter
    assert [x.hex() for x in got] == [x.hex() for x in _reference(table)]
