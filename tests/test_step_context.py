"""after_prefill / after_idle: computed the same way by the simulator (stepping and
fast-forward) and the real driver, and as their definition says."""
from __future__ import annotations

import numpy as np
import pytest

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.features import IDLE_GAP_S, StepHistory
from batchlab.core.workload import Workload
from batchlab.sim import simulate

CONTEXT = ("after_prefill", "after_idle", "num_prefill_seqs", "decode_tokens")
# Requests far enough apart that each finds the engine idle, two at once, and prompts
# long enough for several chunks under chunked prefill.
W = Workload(np.array([0.0, 0.3, 0.6, 0.6, 1.0]), np.array([40, 9, 70, 25, 33]),
             np.array([6, 9, 4, 12, 7]))
COST = LinearCostModel(0.003, {"prefill_tokens": 2e-5, "after_prefill": 0.001, "after_idle": 0.002})


def test_history_follows_its_definition():
    h = StepHistory()
    assert h.context(0.0) == (0, 1)  # the first step of a run
    h.ran(1.0, prefill=True)
    assert h.context(1.0) == (1, 0)
    h.ran(1.01, prefill=False)
    h.went_idle()
    assert h.context(1.01 + IDLE_GAP_S / 2) == (0, 0)  # too short a nap to count
    assert h.context(1.01 + IDLE_GAP_S) == (0, 1)
    h.ran(2.0, prefill=False)
    assert h.context(2.5) == (0, 0)  # a long gap without an empty schedule: overhead, not idle


@pytest.mark.parametrize("policy,budget", [("continuous", None), ("chunked", 16)])
def test_simulator_flags_steps_by_definition_stepping_or_fast_forward(policy, budget):
    cfg = SchedulerConfig(policy=policy, max_num_batched_tokens=budget)
    fast = simulate(W, cfg, COST, 400).steps
    slow = simulate(W, cfg, COST, 400, fast_forward=False).steps
    for c in fast:
        np.testing.assert_array_equal(fast[c], slow[c], err_msg=c)
    prev_prefill = np.concatenate(([0], fast["num_prefill_seqs"][:-1] > 0))
    np.testing.assert_array_equal(fast["after_prefill"], prev_prefill)
    gap = np.concatenate(([np.inf], fast["start_s"][1:] - fast["start_s"][:-1] - fast["duration_s"][:-1]))
    np.testing.assert_array_equal(fast["after_idle"], gap >= IDLE_GAP_S)
    assert fast["after_idle"].sum() == 4  # 0, 0.3, 0.6 (two at once), 1.0
    # the prices include the terms: a flagged step costs what its flags add
    assert np.allclose(fast["duration_s"], 0.003 + 2e-5 * fast["prefill_tokens"]
                       + 0.001 * fast["after_prefill"] + 0.002 * fast["after_idle"])


SPREAD = 4.0


@pytest.mark.parametrize("policy,budget", [("continuous", None), ("chunked", 16)])
def test_real_driver_flags_the_same_steps_as_the_simulator(runtime, policy, budget):
    from batchlab.backend.driver import run_workload
    rt = runtime
    cfg = SchedulerConfig(policy=policy, max_num_batched_tokens=budget)
    # The arrivals 4x further apart, after a warm run: each request's ~20 steps must end
    # before the next arrives, as in the simulator. CI runs on a busy VM met steps 20x their
    # usual time (a shape never run before, or the VM's neighbours), and a request arriving
    # 0.3 s later joined a batch it does not join in the simulator.
    run_workload(rt, W, cfg, progress=False, time_scale=0.0)
    real = run_workload(rt, W, cfg, progress=False, time_scale=SPREAD).steps
    sim = simulate(W.replace(arrival=W.arrival * SPREAD), cfg, COST, int(rt.kv_blocks(cfg.block_size))).steps
    for c in CONTEXT:
        np.testing.assert_array_equal(real[c], sim[c], err_msg=c)
