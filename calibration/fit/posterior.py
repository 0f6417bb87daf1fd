"""What a least-squares fit's data tell of its log-parameters: the Laplace approximation at
the fit. The Jacobian J of the data residuals gives the precision J'J / s^2 + I / prior_sd^2
(s: the residuals' own scale, at least `noise`; the weak prior keeps a combination the data
never reach finite). A parameter's posterior sd says how far the data pin it; a correlation
near +-1 between two says the data tell only a combination of them, not the split."""
from __future__ import annotations

import numpy as np


def covariance(J: np.ndarray, r: np.ndarray, noise: float, prior_sd: float) -> np.ndarray:
    """The posterior covariance of the log-parameters (J: residuals x parameters)."""
    s2 = max(noise ** 2, float(np.mean(r ** 2))) if r.size else noise ** 2
    h = J.T @ J / s2 + np.eye(J.shape[1]) / prior_sd ** 2
    return np.linalg.inv(h)


def spread(J: np.ndarray, r: np.ndarray, noise: float, prior_sd: float) -> tuple[np.ndarray, np.ndarray]:
    """(sd, correlation matrix) of the log-parameters."""
    cov = covariance(J, r, noise, prior_sd)
    sd = np.sqrt(np.diag(cov))
    return sd, cov / np.outer(sd, sd)


def told_together(names: list[str], corr: np.ndarray, beyond: float) -> list[tuple[str, str, float]]:
    """The pairs (a, b, correlation) correlated beyond `beyond` either way: told only together."""
    k = len(names)
    return [(names[i], names[j], float(corr[i, j])) for i in range(k) for j in range(i + 1, k)
            if abs(corr[i, j]) > beyond]
