"""Ctrl-C in round-robin replicas run apart in windows of time (sim/apart.py): the run keeps
what it simulated, each request recorded once, as the whole run did it, and simulated_s is
a span every replica was simulated to: the requests that finish before it in the whole
run finished, at the same times, in the part kept."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.workload import Workload
from tests.same_runs import switched
from tests.test_apart import COST

simulate_module = importlib.import_module("batchlab.sim.simulate")
apart_module = importlib.import_module("batchlab.sim.apart")


def pressed_after(n: int, seen: list[int]):
    """A progress callback that presses Ctrl-C as the n-th request leaves."""
    def progress(k: int) -> None:
        seen[0] += k
        if seen[0] >= n:
            raise KeyboardInterrupt
    return progress


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(2, 120), replicas=st.integers(2, 6),
       per_window=st.integers(1, 5), policy=st.sampled_from(["continuous", "chunked"]),
       fast_forward=st.booleans(), at=st.floats(0.0, 1.0))
def test_an_interrupted_run_in_windows_keeps_a_span(seed, n, replicas, per_window, policy, fast_forward, at):
    rng = np.random.default_rng(seed)
    w = Workload(np.cumsum(rng.exponential(0.05, n)), rng.integers(1, 300, n), rng.integers(1, 60, n))
    kw = dict(scheduler=SchedulerConfig(policy=policy, max_num_seqs=4), cost=COST, num_kv_blocks=60,
              replicas=replicas, fast_forward=fast_forward)
    full = simulate_module.simulate(w, **kw)
    press, seen = 1 + int(at * (n - 1)), [0]
    with switched(apart_module, "PER_WINDOW", per_window):
        part = simulate_module.simulate(w, progress=pressed_after(press, seen), keep_on_interrupt=True, **kw)
    assert part.meta.interrupted and not full.meta.interrupted
    req, whole = part.requests, full.requests
    ids = req["request_id"]
    assert len(np.unique(ids)) == len(ids)  # nothing recorded twice
    left = np.isin(req["status"], ["finished", "rejected"])
    assert left.sum() >= press  # those that left with the one pressed on, in its step, too
    assert set(req["status"][~left]) <= {"running", "waiting"}
    by_id = {i: k for k, i in enumerate(whole["request_id"])}
    same = [by_id[i] for i in ids[left]]
    assert np.array_equal(req["status"][left], whole["status"][same])
    assert np.array_equal(req["finish_s"][left], whole["finish_s"][same])
    # Every replica was simulated to simulated_s: what finished before it, kept.
    span = part.meta.simulated_s
    before = whole["request_id"][(whole["status"] == "finished") & (whole["finish_s"] < span)]
    assert set(before.tolist()) <= set(ids[req["status"] == "finished"].tolist())
    assert span <= full.meta.simulated_s


def test_an_interrupt_in_the_middle_of_a_window_keeps_the_last_window_all_reached():
    """Pressed in the first replica's second window: the others reached the first window's
    end and no further; the first replica's rows reach past it."""
    n, replicas = 120, 3
    w = Workload(np.arange(n) * 0.25, np.full(n, 64), np.full(n, 16))
    kw = dict(scheduler=SchedulerConfig(policy="continuous", max_num_seqs=4), cost=COST, num_kv_blocks=400,
              replicas=replicas)
    full = simulate_module.simulate(w, **kw)
    with switched(apart_module, "PER_WINDOW", 5):
        ends = apart_module.window_ends(w, replicas)
        first = full.requests["request_id"][full.requests["finish_s"] < ends[0]]
        # replica 0 runs its second window after the three ran their first: pressed there
        press = len(first) + 2
        part = simulate_module.simulate(w, progress=pressed_after(press, [0]), keep_on_interrupt=True, **kw)
    assert ends[:2] == [3.75, 7.5]
    assert part.meta.interrupted and part.meta.simulated_s == ends[0]
    req = part.requests
    done = req["status"] == "finished"
    assert set(first.tolist()) <= set(req["request_id"][done].tolist())
    assert (req["replica"][req["finish_s"] > ends[0]] == 0).all()


def test_without_keep_on_interrupt_ctrl_c_propagates_apart():
    w = Workload(np.arange(60) * 0.1, np.full(60, 16), np.full(60, 20))
    with pytest.raises(KeyboardInterrupt):
        simulate_module.simulate(w, SchedulerConfig(policy="continuous"), COST, 400, replicas=3,
                                 progress=pressed_after(5, [0]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(8, 120), replicas=st.integers(2, 6), groups=st.integers(2, 3),
       data=st.data())
def test_groups_merged_after_ctrl_c_in_one_keep_the_span_every_replica_reached(seed, n, replicas, groups, data):
    """`--workers`: Ctrl-C stops one group short while the others ran to their ends; the
    merged run's simulated_s is a span all replicas reached (the stopped group's, not the
    latest end), so what finished before it in the whole run is kept, as it finished."""
    from batchlab.sim.replica_groups import group_workload, merge, replica_groups, simulate_group
    rng = np.random.default_rng(seed)
    w = Workload(np.cumsum(rng.exponential(0.05, n)), rng.integers(1, 300, n), rng.integers(1, 60, n))
    cfg = SchedulerConfig(policy="continuous", max_num_seqs=4)
    full = simulate_module.simulate(w, cfg, COST, 60, replicas=replicas)
    parts, split = [], replica_groups(replicas, groups)
    stopped = data.draw(st.integers(0, len(split) - 1))
    for k, g in enumerate(split):
        mine = group_workload(w, replicas, g)
        press = data.draw(st.integers(1, max(1, len(mine.arrival) - 1))) if k == stopped else None
        parts.append(simulate_group(mine, replicas, g, cfg, COST, 60, keep_on_interrupt=True,
                                    progress=None if press is None else pressed_after(press, [0])))
    part = merge(parts, w)
    assert part.meta.interrupted == parts[stopped].info["interrupted"]
    span = part.meta.simulated_s
    assert span <= full.meta.simulated_s and (part.meta.interrupted or span == full.meta.simulated_s)
    req, whole = part.requests, full.requests
    done = req["status"] == "finished"
    kept = dict(zip(req["request_id"][done].tolist(), req["finish_s"][done].tolist()))
    before = (whole["status"] == "finished") & (whole["finish_s"] < span)
    for i, t in zip(whole["request_id"][before].tolist(), whole["finish_s"][before].tolist()):
        assert kept.get(i) == t
