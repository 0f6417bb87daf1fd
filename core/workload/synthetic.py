"""Synthetic arrivals with the conventions of `vllm bench serve`: Gamma inter-arrival
gaps of mean 1/rate and shape `burstiness` (1 = Poisson, < 1 burstier, > 1 smoother);
rate = inf sends everything at t = 0. The first request arrives at t = 0."""
from __future__ import annotations

import math

import numpy as np


def gamma_arrivals(n: int, rate: float, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    if n == 0 or math.isinf(rate):
        return np.zeros(n)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n - 1)
    out = np.empty(n)
    out[0] = 0.0
    np.cumsum(gaps, out=out[1:])  # summed in order, as into a new array
    return out
