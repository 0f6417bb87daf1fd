"""The stable/overloaded verdict on request tables of known queues."""
import numpy as np

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
