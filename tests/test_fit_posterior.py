"""What a fit's data tell of each parameter (calibration/fit/posterior.py), and the served
fit's report of it (calibration/served_bench/fit.py, calibrate --from-served)."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.calibration.fit.posterior import covariance, spread, told_together
from batchlab.calibration.served_bench.fit import PRIOR_SD, _what_rows_tell

NAMES = ["a", "b", "c"]


def _jacobian(seed: int, rows: int = 40) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(rows, 3))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.2, 5.0), st.sampled_from([1.0, -1.0]))
def test_two_parameters_that_move_every_residual_alike_are_told_only_together(seed, scale, sign):
    J = _jacobian(seed)
    J[:, 1] = sign * scale * J[:, 0]  # b moves every residual as a (or against it) does
    sd, corr = spread(J * 10, np.zeros(len(J)), noise=0.05, prior_sd=math.log(4))
    assert np.allclose(corr, corr.T) and np.all(np.linalg.eigvalsh(covariance(J, np.zeros(len(J)), 0.05, 2.0)) > 0)
    pairs = told_together(NAMES, corr, 0.9)
    assert ("a", "b") in [(x, y) for x, y, _ in pairs]
    c = next(c for x, y, c in pairs if (x, y) == ("a", "b"))
    assert np.sign(c) == -sign  # moving together, the data pin a + sign * scale * b: a and b trade off
    # what the data do pin, they pin: c, on its own column, is told to within a few percent
    assert sd[2] < 0.1 * math.log(4)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000))
def test_independent_parameters_are_each_told_and_none_together(seed):
    J = _jacobian(seed, rows=200) * 10
    sd, corr = spread(J, np.zeros(len(J)), noise=0.05, prior_sd=math.log(4))
    assert told_together(NAMES, corr, 0.9) == []
    assert np.all(sd < 0.05)


def test_residuals_wider_than_the_noise_widen_every_spread():
    J = _jacobian(1) * 10
    quiet, _ = spread(J, np.full(len(J), 0.01), noise=0.05, prior_sd=math.log(4))
    loud, _ = spread(J, np.full(len(J), 0.5), noise=0.05, prior_sd=math.log(4))
    assert np.all(loud > 5 * quiet)


def test_a_served_term_no_row_moves_is_untold_and_said_so_not_paired():
    J = _jacobian(2) * 10
    J[:, 2] = 0.0  # c scales an efficiency at the datasheet's ceiling: no price moves with it
    factors, untold, pairs, flat = _what_rows_tell(NAMES, J, np.zeros(len(J)))
    assert flat == ["c"] and untold == ["c"]
    assert factors["c"] == math.exp(PRIOR_SD)  # exactly the prior's spread: the rows say nothing
    assert factors["a"] < 1.05 and all("c" not in p[:2] for p in pairs)
