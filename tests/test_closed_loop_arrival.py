"""A closed-loop request arrives when its user sends it (the previous reply's finish +
think time), in the real driver as in the simulator, even when the step in progress ends
later: the request then queues, and both worlds see that queueing delay."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")  # the backend extra; without it the module skips

from scipy import stats

from batchlab.backend.driver import run_workload
from batchlab.core.config import SchedulerConfig
from batchlab.core.batch import FEATURE_NAMES
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.cost.at_speed import CostAtSpeed
from batchlab.core.cost.loop_time import fit_overhead
from batchlab.core.result import RunResult
from batchlab.core.workload import Workload
from batchlab.experiments.validation.pair import run_real, run_sim, sim_scheduler

ZERO_S = 0.0002  # "no delay": the buggy driver stamped the poll, 0.2 ms is far above that


def fit_linear_cost(run: RunResult) -> LinearCostModel:
    """LinearCostModel over FEATURE_NAMES least-squares fitted to a run's own step
    durations, coefficients >= 0 (so no step is priced below zero): the run's own step
    costs, so that a comparison is of when requests arrive and queue, not of a profile."""
    from scipy.optimize import nnls

    st = run.steps
    x = np.column_stack([np.ones(len(st["duration_s"]))] + [st[n].astype(float) for n in FEATURE_NAMES])
    scale = np.maximum(np.abs(x).max(axis=0), 1.0)  # conditioning: features span 1..1e6
    coef = nnls(x / scale, st["duration_s"])[0] / scale
    return LinearCostModel(float(coef[0]), {n: float(c) for n, c in zip(FEATURE_NAMES, coef[1:])})


def test_the_self_fit_recovers_a_linear_cost():
    """The fit this module's comparison relies on, on a run a linear model priced."""
    from batchlab.core.config import SchedulerConfig as Sched
    from batchlab.core.workload import WorkloadConfig, build_workload

    cost = LinearCostModel(0.010, {"num_seqs": 2e-4, "prefill_tokens": 5e-5, "kv_tokens_read": 1e-7})
    w = build_workload(WorkloadConfig(source="chat", num_requests=30, rate=20.0, seed=3, max_prompt_len=128,
                                      max_output_len=40))
    sim = run_sim(w, Sched(policy="continuous", max_num_seqs=8, num_kv_blocks=400, block_size=16), cost)
    fitted = fit_linear_cost(sim.result)
    pred = fitted.intercept + sum(c * sim.result.steps[n] for n, c in fitted.coef.items())
    np.testing.assert_allclose(pred, sim.result.steps["duration_s"], rtol=1e-6)


def closed_loop(n: int, users: int, think: float, seed: int = 3) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(np.zeros(n), rng.integers(8, 120, n), rng.integers(3, 24, n),
                    max_concurrency=users, think_time_s=think,
                    description=[f"closed loop: {n} requests, {users} users, think {think:g} s"])


def test_arrival_is_the_send_time_not_the_next_poll(runtime):
    users, think = 2, 0.004
    w = closed_loop(14, users, think)
    req = run_workload(runtime, w, SchedulerConfig(block_size=8), progress=False).requests
    assert (req["status"] == "finished").all()
    # Slots free at finish + think, taken in order: the k-th request after the first
    # `users` is sent at the (k - users)-th earliest of them, to the bit.
    freed = np.sort(req["finish_s"] + think)
    sent = np.sort(req["arrival_s"])
    assert np.array_equal(sent[:users], [0.0] * users)
    assert np.array_equal(sent[users:], freed[:len(w) - users])
    assert (req["first_scheduled_s"] >= req["arrival_s"]).all()


def queueing(requests: dict) -> np.ndarray:
    return requests["first_scheduled_s"] - requests["arrival_s"]


def test_queueing_delay_distribution_matches_the_simulation(runtime):
    """A think time about two decode steps long: most users send mid-step, and their
    request waits for the step in progress to end (in the simulator, by construction)."""
    from batchlab.experiments.studies.common import BUSY
    from batchlab.experiments.studies.common_backend import slowdown, speed_reference, unless_busy

    w = closed_loop(60, 4, 0.007, seed=7)
    cfg = SchedulerConfig(policy="continuous", block_size=8, max_num_seqs=8)
    reference = speed_reference(4, rt=runtime)
    # Three real runs, judged on their medians. A run whose decode steps took more than BUSY
    # times the reference's shared the CPU (seen in CI: 7-12% zero delay real against 27-37%
    # simulated, the schedules parting after a few disturbed steps): it is run once more, and
    # only runs at the reference speed are judged.
    zero_real, zero_sim, ks, median_q, slow = [], [], [], [], []
    for _ in range(3):
        real, _ = unless_busy(lambda: run_real(runtime, w, cfg),
                              lambda r: slowdown(r.result.steps, reference), lambda s: None)
        slow.append(slowdown(real.result.steps, reference))
        if not slow[-1] <= BUSY:
            continue
        # The run's own step costs (self-fit + between-step time), so the comparison is of
        # when requests arrive and queue, not of a profile's price.
        cost = CostAtSpeed(fit_linear_cost(real.result), loop=fit_overhead(real.result))
        sim = run_sim(w, sim_scheduler(cfg, real.result), cost)
        q_real, q_sim = queueing(real.result.requests), queueing(sim.result.requests)
        zero_real.append((q_real < ZERO_S).mean())
        zero_sim.append((q_sim < ZERO_S).mean())
        ks.append(stats.ks_2samp(q_real, q_sim).statistic)
        median_q.append(np.median(q_real))
    if not ks:
        pytest.skip(f"every run shared the CPU: decode steps {', '.join(f'{x:.2f}' for x in slow)}x "
                    f"the reference's (busy above {BUSY}x)")
    zero_real, zero_sim, ks = np.median(zero_real), np.median(zero_sim), np.median(ks)
    # With the poll stamped as arrival, this very run gave zero delay to 100% of real
    # requests against 13-20% simulated, KS 0.90-0.93. Fixed: 3-8% vs 10-13%, KS 0.22-0.32
    # on a quiet machine (six runs), and KS 0.40-0.57 with the real run getting 0.35-0.8 of
    # a core (other processes disturb its steps, and the schedules part after a few steps).
    assert abs(zero_real - zero_sim) < 0.2, (zero_real, zero_sim, slow)
    assert ks < 0.7, (ks, slow)
    assert np.median(median_q) > ZERO_S  # the real requests did queue
