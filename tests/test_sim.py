"""The SimPy engine around the shared schedulers."""
from __future__ import annotations

import numpy as np
import pytest

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.workload import Workload
from batchlab.sim import simulate

UNIT = LinearCostModel(0.01)


def w(arrival, prompt, output, **kw) -> Workload:
    return Workload(np.asarray(arrival, float), np.asarray(prompt), np.asarray(output), **kw)


def seed_scenario() -> Workload:
    """8 seats' worth of queue: most replies 12-40 tokens, one in 25 of 500 tokens."""
    rng = np.random.default_rng(1)
    out = rng.integers(12, 41, 200)
    out[::25] = 500
    return w(np.zeros(200), np.full(200, 32), out)


def test_static_slot_utilisation_far_below_continuous():
    util = {p: simulate(seed_scenario(), SchedulerConfig(policy=p, max_num_seqs=8), UNIT, 10_000)
            .summary()["slot_utilization"] for p in ("static", "continuous", "chunked")}
    assert util["static"] < 0.3
    assert util["continuous"] > 2.5 * util["static"]
    assert util["chunked"] > 2.5 * util["static"]


def test_continuous_throughput_beats_static_on_the_seed_scenario():
    tput = {p: simulate(seed_scenario(), SchedulerConfig(policy=p, max_num_seqs=8), UNIT, 10_000)
            .summary()["output_throughput"] for p in ("static", "continuous")}
    assert tput["continuous"] > 2 * tput["static"]


def test_idle_engine_sleeps_until_the_next_arrival():
    r = simulate(w([0.0, 1000.0], [4, 4], [3, 3]), SchedulerConfig(), UNIT, 100)
    req, steps = r.requests, r.steps
    assert len(steps["start_s"]) == 6  # 2 x (1 prefill + 2 decodes); no idle steps
    assert req["first_scheduled_s"][1] == 1000.0
    assert req["finish_s"][1] == pytest.approx(1000.03)
    assert req["first_token_s"][0] == pytest.approx(0.01)


def test_static_waits_for_a_fuller_batch_up_to_the_delay():
    cfg = SchedulerConfig(policy="static", max_num_seqs=4, max_batch_delay_s=1.0)
    r = simulate(w([0.0, 0.5, 3.0], [4, 4, 4], [2, 2, 2]), cfg, UNIT, 100)
    first = r.requests["first_scheduled_s"]
    assert first[0] == first[1] == 1.0  # held until the oldest waited 1 s
    assert first[2] == 4.0


def test_full_batch_starts_without_waiting():
    cfg = SchedulerConfig(policy="static", max_num_seqs=2, max_batch_delay_s=5.0)
    r = simulate(w([0.0, 0.5], [4, 4], [2, 2]), cfg, UNIT, 100)
    assert r.requests["first_scheduled_s"].tolist() == [0.5, 0.5]


@pytest.mark.parametrize("policy", ["static", "continuous", "chunked"])
def test_kv_pressure_preempts_and_still_finishes_everything(policy):
    work = w(np.zeros(6), np.full(6, 30), np.full(6, 40))
    r = simulate(work, SchedulerConfig(policy=policy, max_num_seqs=6, block_size=8), UNIT, 20)
    s = r.summary()
    assert s["completed"] == 6
    assert s["preemptions"] > 0
    assert r.requests["preemptions"].sum() == s["preemptions"]
    assert r.steps["kv_blocks_used"].max() <= 20


def test_request_that_can_never_fit_is_rejected_with_a_reason():
    r = simulate(w([0.0, 0.0], [10, 500], [5, 5]), SchedulerConfig(block_size=16), UNIT, 10)
    req = r.requests
    assert req["status"].tolist() == ["finished", "rejected"]
    assert "KV blocks" in req["reject_reason"][1]
    assert r.summary()["rejected"] == 1


@pytest.mark.parametrize("policy", ["static", "continuous", "chunked"])
def test_request_longer_than_max_model_len_is_rejected(policy):
    cfg = SchedulerConfig(policy=policy, max_model_len=100)
    r = simulate(w([0.0, 0.0, 0.0], [50, 60, 99], [50, 41, 1]), cfg, UNIT, 1000)
    assert r.requests["status"].tolist() == ["finished", "rejected", "finished"]
    assert "101 tokens exceeds max_model_len=100" in r.requests["reject_reason"][1]


def test_replicas_share_the_load():
    work = w(np.zeros(40), np.full(40, 8), np.full(40, 50))
    one = simulate(work, SchedulerConfig(max_num_seqs=4), UNIT, 1000).summary()
    two = simulate(work, SchedulerConfig(max_num_seqs=4), UNIT, 1000, replicas=2,
                   router="least_loaded")
    assert set(two.requests["replica"].tolist()) == {0, 1}
    assert two.summary()["duration"] < 0.6 * one["duration"]


def test_closed_loop_keeps_at_most_n_in_flight():
    work = w(np.zeros(10), np.full(10, 8), np.full(10, 5), max_concurrency=2, think_time_s=0.5)
    req = simulate(work, SchedulerConfig(), UNIT, 1000).requests
    events = sorted([(t, 1) for t in req["arrival_s"]] + [(t, -1) for t in req["finish_s"]],
                    key=lambda e: (e[0], e[1]))
    in_flight = np.cumsum([d for _, d in events])
    assert in_flight.max() == 2
    # A user's next request comes think_time after a reply.
    assert np.isclose(np.sort(req["arrival_s"])[2], np.sort(req["finish_s"])[0] + 0.5)


def test_same_seed_same_tables():
    a = simulate(seed_scenario(), SchedulerConfig(policy="chunked", max_num_seqs=8), UNIT, 60)
    b = simulate(seed_scenario(), SchedulerConfig(policy="chunked", max_num_seqs=8), UNIT, 60)
    for t in ("requests", "steps"):
        for col, v in getattr(a, t).items():
            assert np.array_equal(v, getattr(b, t)[col]), col


def test_a_closed_loop_burst_at_t0_is_seen_whole():
    """32 users sending at t=0: a static batch of 8 forms at once, not a batch of 1."""
    work = w(np.zeros(32), np.full(32, 8), np.full(32, 5), max_concurrency=32)
    r = simulate(work, SchedulerConfig(policy="static", max_num_seqs=8), UNIT, 1000)
    assert r.steps["num_seqs"][0] == 8
    assert (r.requests["first_scheduled_s"] == 0).sum() == 8


def interrupt_after(n: int):
    """A progress callback that presses Ctrl-C once n requests have left."""
    left = [0]

    def progress(k: int) -> None:
        left[0] += k
        if left[0] >= n:
            raise KeyboardInterrupt
    return progress


def test_an_interrupted_replay_keeps_what_was_simulated():
    work = w(np.arange(100) * 0.05, np.full(100, 16), np.full(100, 40))
    cfg = SchedulerConfig(policy="continuous", max_num_seqs=4)
    full = simulate(work, cfg, UNIT, 1000)
    part = simulate(work, cfg, UNIT, 1000, progress=interrupt_after(30), keep_on_interrupt=True)
    assert part.meta.interrupted and not full.meta.interrupted
    req = part.requests
    done = req["status"] == "finished"
    assert 30 <= done.sum() < 34  # those that left with the 30th, in its step, too
    assert 30 < len(req["status"]) < 100  # rows for the requests that had arrived
    assert set(req["status"][~done]) <= {"running", "waiting"}
    # What was simulated is what the full run did up to then.
    ids = req["request_id"][done]
    by_id = dict(zip(full.requests["request_id"], full.requests["finish_s"]))
    assert np.array_equal(req["finish_s"][done], [by_id[i] for i in ids])
    assert part.meta.simulated_s < full.requests["finish_s"].max()


def test_without_keep_on_interrupt_ctrl_c_propagates():
    work = w(np.zeros(20), np.full(20, 16), np.full(20, 40))
    with pytest.raises(KeyboardInterrupt):
        simulate(work, SchedulerConfig(policy="continuous"), UNIT, 1000, progress=interrupt_after(5))
