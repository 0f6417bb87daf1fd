"""Runs that must be the same: the cost models the fast-forward and prefix tests price with,
and the check that two runs agree request by request and step by step."""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from types import ModuleType

import numpy as np

from batchlab.core.cost.dispatch import roofline
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.cost.at_speed import CostAtSpeed
from batchlab.core.cost.loop_time import Overhead
from batchlab.core.cost.profile import load_profile
from batchlab.core.model.presets import lookup_hardware, lookup_model

COSTS = {
    "linear": LinearCostModel(0.004, {"num_seqs": 1e-5, "prefill_tokens": 2e-5,
                                      "decode_tokens": 3e-5, "kv_tokens_read": 1e-7}),
    "linear_context": LinearCostModel(0.004, {"num_seqs": 1e-5, "prefill_tokens": 2e-5,
                                              "decode_tokens": 3e-5, "after_prefill": 0.003,
                                              "after_idle": 0.002}),
    "roofline": roofline(lookup_model("llama-3-8b"), lookup_hardware("a100-80gb"), 1, 0.8, 0.6, 0.002),
    "calibrated": load_profile("default").cost_model(),  # the shipped CPU profile's fit
    # ... with context terms: a decode run's first step priced after a prefill / idle gap
    "calibrated_context": dataclasses.replace(load_profile("default").cost_model(),
                                              after_prefill_s=0.004, after_idle_s=0.006),
    # ... at a measured speed, plus the loop's time between steps (core/cost/at_speed.py)
    "calibrated_at_speed": CostAtSpeed(load_profile("default").cost_model(), 1.1, 0.9,
                                       loop=Overhead(2e-4, 1e-5, 0.0, 0)),
    "roofline_at_speed": CostAtSpeed(roofline(lookup_model("llama-3-8b"), lookup_hardware("a100-80gb"),
                                              1, 0.8, 0.6, 0.002), 1.2, loop=Overhead(1e-4, 0.0, 0.0, 0)),
}


def assert_same(a, b):
    for table in ("requests", "steps"):
        ta, tb = getattr(a, table), getattr(b, table)
        for col in ta:
            x, y = ta[col], tb[col]
            assert len(x) == len(y), (table, col)
            if x.dtype.kind == "f":
                np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-9, err_msg=f"{table}.{col}")
            else:
                assert np.array_equal(x, y), f"{table}.{col}"
    np.testing.assert_allclose(np.sort(a.itl), np.sort(b.itl), rtol=1e-9, atol=1e-9)


def assert_identical(a, b) -> None:
    """Every column of both tables, the gaps and the simulated time equal, to the bit."""
    for x, y in ((a.requests, b.requests), (a.steps or {}, b.steps or {})):
        assert x.keys() == y.keys()
        for k in x:
            u, v = np.asarray(x[k]), np.asarray(y[k])
            assert u.dtype == v.dtype, k
            assert u.tolist() == v.tolist() if u.dtype.kind == "O" else u.tobytes() == v.tobytes(), k
    assert a.itl_gaps.tobytes() == b.itl_gaps.tobytes() and a.itl_counts.tobytes() == b.itl_counts.tobytes()
    assert a.meta.simulated_s == b.meta.simulated_s


@contextlib.contextmanager
def switched(module: ModuleType, name: str, value: object) -> Iterator[None]:
    """A module's switch (a reference path's flag) set to value, then put back."""
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)
