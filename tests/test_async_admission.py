"""Async scheduling's admission lag (sim/admission.py): a request that reaches a busy
engine joins one step later than a synchronous engine takes it; one that reaches an idle
engine waits for nothing; off, the simulation is the one it always was."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.workload import Workload
from batchlab.sim import simulate
from batchlab.sim.admission import AdmissionLag

STEP_S = 0.01
FLAT = LinearCostModel(STEP_S, {})  # every step the same: TTFT counts steps
SCHED = SchedulerConfig(policy="chunked", max_num_seqs=8, max_num_batched_tokens=512, num_kv_blocks=400)


def closed_loop(outputs: list[int], rounds: int, prompt: int = 16) -> Workload:
    users = len(outputs)
    n = users * rounds
    return Workload(np.zeros(n), np.full(n, prompt), np.tile(outputs, rounds), max_concurrency=users,
                    description=["closed loop"])


def ttft_steps(result) -> np.ndarray:
    r = result.requests
    return np.rint((np.asarray(r["first_token_s"]) - np.asarray(r["arrival_s"])) / STEP_S).astype(int)


def test_a_resend_to_a_busy_engine_waits_one_step_more():
    """Two users out of phase: a synchronous engine prefills every re-send in the next
    step; an async one in the step after, unless the other user's work is done too."""
    w = closed_loop([3, 7], rounds=4)
    sync = simulate(w, SCHED, FLAT, 400)
    lagged = simulate(w, SCHED, FLAT, 400, async_scheduling=True)
    assert set(ttft_steps(sync)) == {1}
    steps = ttft_steps(lagged)
    assert set(steps) <= {1, 2} and (steps == 2).sum() >= 2
    first_round = np.asarray(lagged.requests["arrival_s"]) == 0
    assert (steps[first_round] == 1).all()  # the burst at t=0 reaches an idle engine


def test_a_lone_user_never_waits():
    """One user: each re-send finds nothing else to run, and an idle engine takes it at once."""
    w = closed_loop([5], rounds=3)
    lagged = simulate(w, SCHED, FLAT, 400, async_scheduling=True)
    assert set(ttft_steps(lagged)) == {1}


@settings(max_examples=15, deadline=None)
@given(outputs=st.lists(st.integers(2, 12), min_size=1, max_size=4), rounds=st.integers(1, 3))
def test_every_request_is_served_and_none_sooner(outputs, rounds):
    """The lag delays, never drops or hurries: every request finishes, no TTFT below the
    synchronous engine's one step, none above two."""
    w = closed_loop(outputs, rounds)
    lagged = simulate(w, SCHED, FLAT, 400, async_scheduling=True)
    assert (np.asarray(lagged.requests["status"]) == "finished").all()
    steps = ttft_steps(lagged)
    assert steps.min() >= 1 and steps.max() <= 2


def test_held_requests_come_out_after_one_more_step_in_order():
    lag = AdmissionLag()
    lag.hold("a", 3)
    lag.hold("b", 3)
    lag.hold("c", 4)
    assert lag.due(3) == []
    assert lag.due(4) == ["a", "b"]
    assert lag.all() == ["c"] and not lag
