"""A replica's loop resumed without a SimPy process (sim/resumption.py): its waits are
processed in SimPy's own order, an idle replica's wake costs the alarm and its decision
and no more, and a stale alarm (a request came first) does nothing."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import simpy
from hypothesis import given
from hypothesis import strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.metrics import MetricsRecorder
from batchlab.core.request import Request
from batchlab.core.schedulers import make_scheduler
from batchlab.core.workload import Workload
from batchlab.sim import arrivals, simulate
from batchlab.sim.counting import counting_decisions, counting_events
from batchlab.sim.engine import Replica
from batchlab.sim.events import Delay
from batchlab.sim.resumption import EventQueue, Resumption
from tests.same_runs import switched

COST = LinearCostModel(0.004, {"prefill_tokens": 2e-5, "num_seqs": 1e-4, "kv_tokens_read": 1e-7})


@given(st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0]), st.integers(0, 2), st.booleans()),
                min_size=1, max_size=30))
def test_resumptions_and_events_are_processed_in_one_order(waits):
    """Mixed with SimPy's own events, by time, then priority, then the order scheduled,
    and each calls back with itself."""
    env = simpy.Environment()
    seen: list[int] = []
    for i, (t, priority, own) in enumerate(waits):
        if own:
            r = Resumption([lambda event, i=i: seen.append(i)])
            r.push(env, t, priority)
        else:
            Delay(env, t, priority).callbacks.append(lambda event, i=i: seen.append(i))
    env.run()
    assert seen == sorted(range(len(waits)), key=lambda i: (waits[i][0], waits[i][1], i))


@given(st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0]), st.integers(0, 2), st.sampled_from(["queue", "simpy", "moved"])),
                min_size=1, max_size=30))
def test_an_event_queue_runs_in_simpys_order(waits):
    """Resumptions on an EventQueue, merged with SimPy's own events, in SimPy's one order
    (time, priority, order scheduled); a moved one (first pushed for 2.0) as if pushed
    where it was moved, and the clock ends where the latest wait, moved or not, was due."""
    env = simpy.Environment()
    queue = EventQueue(env)
    seen: list[int] = []
    for i, (t, priority, kind) in enumerate(waits):
        if kind == "simpy":
            Delay(env, t, priority).callbacks.append(lambda event, i=i: seen.append(i))
            continue
        r = Resumption([lambda event, i=i: seen.append(i)], queue)
        if kind == "moved":
            r.push(env, 2.0, priority)
            assert r.move(env, t, priority)
        else:
            r.push(env, t, priority)
    queue.run()
    assert seen == sorted(range(len(waits)), key=lambda i: (waits[i][0], waits[i][1], i))
    assert env.now == (2.0 if any(w[2] == "moved" for w in waits) else max(w[0] for w in waits))
    assert queue.processed == sum(w[2] != "simpy" for w in waits) and not queue.heap


def test_one_resumption_serves_wait_after_wait():
    env = simpy.Environment()
    times: list[float] = []

    def again(event: object) -> None:
        times.append(env.now)
        if len(times) < 3:
            r.push_after(env, 0.25, 1)
    r = Resumption([again])
    r.push_after(env, 0.5, 1)
    env.run()
    assert times == [0.5, 0.75, 1.0] and r.callbacks is None


def test_a_negative_delay_is_refused_as_simpy_refuses_it():
    env = simpy.Environment()
    with pytest.raises(ValueError, match="Negative delay"):
        Resumption([]).push_after(env, -1e-9, 1)
    with pytest.raises(ValueError, match="Negative delay"):
        env.timeout(-1e-9)


def test_an_idle_replica_wakes_on_its_alarm_and_one_decision_event():
    """Two round-robin replicas, requests far apart: each request but the first meets an
    idle replica, which wakes on its alarm (the arrival, pulled then) and decides after
    the rest of the instant: two events a request, where a process waiting on a
    wake-or-alarm condition took three. Its steps move the clock on without one (the
    other replica's alarm lies far ahead); only replica 0's first step, with replica 1's
    start due at the same instant, waits on the queue."""
    n = 20
    work = Workload(np.arange(n) * 10.0, np.full(n, 50), np.full(n, 40))
    with counting_events() as events, counting_decisions() as decisions, \
            switched(sys.modules["batchlab.sim.simulate"], "APART", False):  # interleaved (not sim/apart.py)
        r = simulate(work, SchedulerConfig(policy="continuous"), COST, 1000, replicas=2)
    assert (r.requests["status"] == "finished").all()
    assert decisions[0] >= 2 * n  # a prefill and at least one decode decision a request
    # The two starts, that first step and two a request. (SimPy's env.run counted one step
    # more, finding the queue empty; the simulation's EventQueue runs them: no such step.)
    assert events[0] == 2 + 1 + 2 * (n - 1)


def test_a_stale_alarm_does_nothing(monkeypatch):
    """A static batch waits for company until a deadline (its alarm); a request sent by
    a process (not pulled) comes before it, fills the batch and wakes the replica. The
    alarm, due mid-run, must neither wake it again nor cut its step: the run equals the
    one whose deadline lies past the end (an alarm due only once all is done)."""
    monkeypatch.setattr(arrivals, "PULL", False)
    work = Workload(np.array([0.0, 0.01, 0.3, 0.31]), np.full(4, 40), np.full(4, 30))
    rows = []
    for delay in (0.05, 1e6):
        cfg = SchedulerConfig(policy="static", max_num_seqs=2, max_batch_delay_s=delay)
        rows.append(simulate(work, cfg, COST, 1000).requests)
    assert (rows[0]["status"] == "finished").all()
    assert rows[0]["first_token_s"][0] < 0.05 < rows[0]["finish_s"][0]  # the alarm came mid-run
    for k in ("first_scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_array_equal(rows[0][k], rows[1][k], err_msg=k)


def test_only_its_current_alarm_wakes_an_idle_replica():
    """An alarm of an earlier sleep (a request woke it first), due while the replica
    sleeps again, is stale: it neither wakes it nor pushes anything."""
    env = simpy.Environment()
    replica = Replica(env, 0, make_scheduler(SchedulerConfig(policy="continuous"), 100), COST,
                      MetricsRecorder(), lambda seq: None)
    env.run()  # it starts, finds nothing to do and sleeps, with no alarm (nothing will come)
    assert replica._sleeping
    replica._alarm_due(Resumption([replica._alarm_due]))
    assert replica._sleeping and env.peek() == math.inf
    replica.submit(Request(0, 0.0, 10, 2), 0.0)  # a request wakes it
    assert not replica._sleeping and env.peek() == 0.0
