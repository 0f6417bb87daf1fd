"""The shared-scheduler promise, for every registered policy: on the same small
workload, the real backend (a torch forward per step) and the simulator take the same
decisions step by step (who runs, how many tokens, who is preempted). Everything
arrives at t=0 and seats are few, so admissions still happen mid-run as seats free,
yet no decision can depend on how long a step took."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")  # the backend extra; without it the module skips

from batchlab.backend.driver import run_workload
from batchlab.backend.runtime import Runtime
from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.workload import Workload
from batchlab.sim import simulate
from tests.draws import policies

# Parameters that make a policy's thresholds bite on this workload (others: defaults).
BITING_PARAMS = {"memory_aware": {"long_prompt": 40, "kv_threshold": 0.3}}
W = Workload(np.zeros(10), np.array([5, 37, 12, 64, 1, 23, 50, 9, 44, 18]),
             np.array([20, 7, 33, 12, 15, 1, 25, 30, 9, 14]), priority=np.array([0, 1] * 5))


@pytest.fixture(scope="module")
def runtime():
    return Runtime("batchlab-tiny", kv_memory="16MiB", threads=1)


def decisions():
    """A step log and the observer that fills it (sim and backend call it alike)."""
    seen = []

    def watch(replica, start, duration, batch):
        seen.append(([s.id for s in batch.seqs], list(batch.num_tokens), [s.id for s in batch.preempted]))
    return seen, watch


@pytest.mark.parametrize("kv_allocation", ["paged", "reserved"])
@pytest.mark.parametrize("policy", policies())
def test_backend_and_simulator_take_the_same_decisions(runtime, policy, kv_allocation):
    # 26 blocks of 4 tokens: far fewer than the 10 requests need together (preemption).
    cfg = SchedulerConfig(policy=policy, max_num_seqs=4, block_size=4, num_kv_blocks=26,
                          max_num_batched_tokens=64, admission="priority",
                          kv_allocation=kv_allocation, params=BITING_PARAMS.get(policy, {}))
    real_log, real_watch = decisions()
    sim_log, sim_watch = decisions()
    real = run_workload(runtime, W, cfg, time_scale=0.0, progress=False, observer=real_watch)
    sim = simulate(W, cfg, LinearCostModel(0.01), 26, observer=sim_watch)
    assert (real.requests["status"] == "finished").all()
    assert real_log == sim_log
    for col in ("num_seqs", "prefill_tokens", "decode_tokens", "num_preempted", "kv_blocks_used"):
        assert np.array_equal(real.steps[col], sim.steps[col]), col
    assert np.array_equal(real.requests["preemptions"], sim.requests["preemptions"])
    if kv_allocation == "reserved":
        assert real.requests["preemptions"].sum() == 0
