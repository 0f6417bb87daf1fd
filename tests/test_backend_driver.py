"""The wall-clock driver: same scheduler, same tables and summary as the simulator;
arrivals honoured on the real clock; a stop keeps what finished."""
from __future__ import annotations

import os
import signal
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the backend extra; without it the module skips

from batchlab.backend.driver import run_workload
from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.workload import Workload
from batchlab.sim import simulate


def wl(arrival, prompt, output, **kw) -> Workload:
    return Workload(np.asarray(arrival, float), np.asarray(prompt), np.asarray(output), **kw)


W = wl(np.zeros(6), [8, 30, 3, 17, 50, 12], [5, 9, 12, 3, 7, 10])


def test_same_tables_and_summary_as_the_simulator(runtime):
    cfg = SchedulerConfig(policy="continuous", block_size=8)
    real = run_workload(runtime, W, cfg, progress=False)
    sim = simulate(W, cfg, LinearCostModel(0.01), real.meta.num_kv_blocks)
    for ours, theirs in ((real.requests, sim.requests), (real.steps, sim.steps)):
        assert list(ours) == list(theirs)
        assert [v.dtype.kind for v in ours.values()] == [v.dtype.kind for v in theirs.values()]
    assert set(real.summary()) == set(sim.summary())
    assert (real.requests["status"] == "finished").all()
    # the same scheduler makes the same decisions when the timing cannot matter
    for col in ("num_seqs", "prefill_tokens", "decode_tokens", "kv_tokens_read", "kv_blocks_used"):
        assert np.array_equal(real.steps[col], sim.steps[col]), col
    assert real.summary()["total_output_tokens"] == W.output_len.sum()


def test_observer_sees_the_steps_the_simulator_observer_sees(runtime):
    cfg = SchedulerConfig(policy="chunked", block_size=8, max_num_batched_tokens=32)
    seen = {"real": [], "sim": []}

    def watch(world):
        return lambda replica, start, duration, batch: seen[world].append(
            (replica, [s.id for s in batch.seqs], list(batch.num_tokens), duration > 0))
    real = run_workload(runtime, W, cfg, progress=False, observer=watch("real"))
    simulate(W, cfg, LinearCostModel(0.01), real.meta.num_kv_blocks, observer=watch("sim"))
    assert len(seen["real"]) == len(real.steps["start_s"]) > 6
    assert seen["real"] == seen["sim"]


def test_metadata_says_what_ran(runtime):
    r = run_workload(runtime, W, SchedulerConfig(policy="chunked", block_size=8), progress=False,
                     time_scale=0.0)
    m = r.meta
    assert m.world == "real" and m.policy == "chunked"
    assert m.model == "batchlab-tiny" and m.dtype == "float32" and m.device == "cpu"
    assert m.threads == torch.get_num_threads() == 1
    assert m.torch == torch.__version__ and m.time_scale == 0.0
    block_bytes = 8 * m.kv_bytes_per_token
    assert m.num_kv_blocks == 32 * 2**20 // block_bytes  # the budget, in blocks
    assert m.steps == len(r.steps["start_s"])
    assert 0 <= m.scheduler_overhead_s < m.wall_s
    assert m.engine_forward_s > 0 and not m.interrupted


def test_arrivals_wait_for_the_wall_clock(runtime):
    w = wl([0.0, 0.3, 0.3], [5, 5, 5], [2, 2, 2])
    r = run_workload(runtime, w, SchedulerConfig(), progress=False, time_scale=0.5)
    req = r.requests
    assert np.allclose(req["arrival_s"], [0.0, 0.15, 0.15])
    assert (req["first_scheduled_s"] >= req["arrival_s"]).all()
    assert req["first_scheduled_s"][1] < 0.15 + 0.1  # released soon after, not at once
    assert r.steps["start_s"].min() >= 0 and np.all(np.diff(r.steps["start_s"]) > 0)


def test_closed_loop_keeps_at_most_n_in_flight(runtime):
    w = wl(np.zeros(6), [4] * 6, [3] * 6, max_concurrency=2, think_time_s=0.01)
    r = run_workload(runtime, w, SchedulerConfig(), progress=False)
    req = r.requests
    assert (req["status"] == "finished").all()
    for t in req["arrival_s"]:
        in_flight = ((req["arrival_s"] <= t) & (req["finish_s"] > t)).sum()
        assert in_flight <= 2
    assert req["arrival_s"][2] >= req["finish_s"][:2].min() + 0.01


def test_rejected_request_is_recorded(runtime):
    cfg = SchedulerConfig(block_size=4, num_kv_blocks=3)  # 12 slots
    r = run_workload(runtime, wl([0, 0], [4, 40], [2, 2]), cfg, progress=False)
    assert list(r.requests["status"]) == ["finished", "rejected"]
    assert "KV blocks" in r.requests["reject_reason"][1]


def test_stop_keeps_what_finished(runtime):
    stop = threading.Event()
    w = wl(np.zeros(4), [4, 4, 4, 4], [2, 2, 200, 200])
    r = run_workload(runtime, w, SchedulerConfig(), progress=False, stop=stop,
                     on_step=lambda k: k >= 5 and stop.set())
    assert r.meta.interrupted
    status = list(r.requests["status"])
    assert status.count("finished") == 2 and len(status) == 4
    assert r.summary()["completed"] == 2


def test_ctrl_c_stops_cleanly(runtime):
    # The handler before the run: Python's default, or SIG_IGN where the test process was
    # started in the background of a non-interactive shell (which ignores SIGINT).
    before = signal.getsignal(signal.SIGINT)
    w = wl(np.zeros(3), [4, 4, 4], [2, 300, 300])
    r = run_workload(runtime, w, SchedulerConfig(), progress=False,
                     on_step=lambda k: k == 4 and os.kill(os.getpid(), signal.SIGINT))
    assert r.meta.interrupted
    assert r.summary()["completed"] == 1
    assert signal.getsignal(signal.SIGINT) is before  # restored


def test_sampling_with_temperature_is_seeded(runtime):
    w = wl(np.zeros(2), [6, 9], [12, 12])
    outs = []
    for seed in (7, 7, 8):
        out: dict[int, list[int]] = {}
        run_workload(runtime, w, SchedulerConfig(), progress=False, temperature=1.0, seed=seed,
                     outputs=out)
        outs.append(out)
    assert outs[0] == outs[1] != outs[2]
