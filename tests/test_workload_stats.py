"""Workload statistics."""
from __future__ import annotations

import math

import numpy as np
import pytest

from batchlab.core.workload import Workload, format_stats, workload_stats


def test_stats_of_a_small_workload():
    w = Workload(np.array([0.0, 0.5, 1.0, 4.0]), [10, 20, 30, 40], [1, 2, 3, 100])
    s = workload_stats(w)
    assert s["num_requests"] == 4 and s["span_s"] == 4.0
    assert s["mean_rate"] == 0.75  # (n - 1) / span
    gaps = np.array([0.5, 0.5, 3.0])
    assert s["interarrival_cv"] == pytest.approx(gaps.std() / gaps.mean())
    assert s["max_gap_s"] == 3.0 and s["peak_rate_1s"] == 2
    assert s["prompt_mean"] == 25 and s["prompt_p50"] == 25 and s["prompt_max"] == 40
    assert s["output_p99"] == pytest.approx(np.percentile([1, 2, 3, 100], 99))
    text = format_stats(s)
    assert "requests          4" in text and "0.75 req/s" in text


def test_degenerate_workloads_do_not_break_the_report():
    one = workload_stats(Workload(np.array([0.0]), [5], [5]))
    assert math.isnan(one["mean_rate"]) and math.isnan(one["interarrival_cv"])
    burst = workload_stats(Workload(np.zeros(10), [5] * 10, [5] * 10))
    assert burst["mean_rate"] == math.inf
    for s in (one, burst):
        assert "requests" in format_stats(s)
