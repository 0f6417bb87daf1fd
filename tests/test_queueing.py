"""Queueing ground truth: one seat, FCFS, constant step cost, Poisson arrivals is an
M/G/1 queue (M/D/1 for fixed lengths); the simulated mean wait must match theory."""
from __future__ import annotations

import numpy as np
import pytest

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.workload import Workload
from batchlab.sim import simulate

STEP = 0.01  # seconds per step, whatever the batch
N = 30_000
BATCHES = 20  # batch means for the standard error of the simulated mean wait


def poisson_workload(lam: float, output_len: np.ndarray, seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    arrivals = np.concatenate(([0.0], np.cumsum(rng.exponential(1 / lam, len(output_len) - 1))))
    return Workload(arrivals, np.ones(len(output_len), dtype=np.int64), output_len)


def mean_wait_and_stderr(w: Workload, policy: str) -> tuple[float, float]:
    # prompt_len 1: a request needs output_len steps (1 prefill + output_len-1 decodes).
    r = simulate(w, SchedulerConfig(policy=policy, max_num_seqs=1), LinearCostModel(STEP), 10_000)
    assert (r.requests["status"] == "finished").all()
    wait = r.requests["first_scheduled_s"] - r.requests["arrival_s"]
    means = wait[: len(wait) // BATCHES * BATCHES].reshape(BATCHES, -1).mean(axis=1)
    return float(wait.mean()), float(means.std(ddof=1) / np.sqrt(BATCHES))


@pytest.mark.parametrize("policy", ["static", "continuous", "chunked"])
def test_md1_mean_wait(policy):
    k = 2
    service = k * STEP
    rho = 0.6
    lam = rho / service
    theory = rho * service / (2 * (1 - rho))  # Pollaczek-Khinchine with zero variance
    mean, se = mean_wait_and_stderr(poisson_workload(lam, np.full(N, k), seed=3), policy)
    assert se < 0.1 * theory, "too few samples to judge"
    assert abs(mean - theory) < 4 * se, f"M/D/1 wait {mean:.5f} s vs theory {theory:.5f} s (se {se:.5f})"


@pytest.mark.parametrize("policy", ["continuous", "chunked"])
def test_mg1_mean_wait_pollaczek_khinchine(policy):
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 8, N)  # uniform 1..7 steps
    es, es2 = 4 * STEP, (140 / 7) * STEP**2  # E[S], E[S^2] of S = L * STEP
    rho = 0.5
    lam = rho / es
    theory = lam * es2 / (2 * (1 - rho))
    mean, se = mean_wait_and_stderr(poisson_workload(lam, lengths, seed=11), policy)
    assert se < 0.1 * theory, "too few samples to judge"
    assert abs(mean - theory) < 4 * se, f"M/G/1 wait {mean:.5f} s vs theory {theory:.5f} s (se {se:.5f})"
