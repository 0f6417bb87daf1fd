"""A server's front end before the engine (core/front_end.py): the queue's arithmetic, the
simulator putting it before the engine with requests keeping their send times, and a
profile carrying it from a fit on client timings to simulate and validate --endpoint."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.front_end import FrontEnd
from batchlab.core.cost.profile import FrontEndParams, load_profile, parse_profile
from batchlab.core.workload import Workload
from batchlab.sim import simulate

sends = st.lists(st.floats(0, 5, allow_nan=False), min_size=1, max_size=40).map(sorted)
fronts = st.builds(FrontEnd, st.floats(0, 0.2), st.floats(0, 0.05))


@given(sends, fronts)
def test_the_front_end_is_a_fifo_single_server_queue(send, front):
    arrival, ahead = front.arrivals(np.array(send))
    assert np.all(np.diff(arrival) >= 0)  # first in, first out
    assert np.all(arrival >= np.array(send) + front.delay_s + front.serial_s - 1e-12)
    # each one leaves a handling time after the one before it, or after its own delay
    prev = -math.inf
    for t, a, k in zip(send, arrival, ahead):
        assert a == max(t + front.delay_s, prev) + front.serial_s
        assert (k > 0) == (prev > t + front.delay_s)
        prev = a


@pytest.mark.parametrize("bad", [-1e-3, math.inf, math.nan])
def test_a_front_end_time_must_be_finite_and_not_negative(bad):
    with pytest.raises(ValueError, match="front end delay_s"):
        FrontEnd(bad, 0.0)


def workload(n=40, seed=3) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(np.cumsum(rng.exponential(0.02, n)), rng.integers(8, 300, n), rng.integers(1, 30, n),
                    description=["test"])


COST = LinearCostModel(0.004, {"prefill_tokens": 2e-5, "num_seqs": 1e-4, "kv_tokens_read": 1e-7})
SCHED = SchedulerConfig(policy="continuous", max_num_seqs=8, num_kv_blocks=400)


@settings(max_examples=15, deadline=None)
@given(fronts, st.booleans())
def test_the_engine_sees_requests_at_their_exits_and_latency_is_from_the_send(front, fast_forward):
    """With a front end the engine runs exactly as if the requests arrived at their exits;
    the requests keep their send times, so TTFT and E2E hold the front end."""
    w = workload()
    exits, _ = front.arrivals(w.arrival)
    with_front = simulate(w, SCHED, COST, 400, front_end=front, fast_forward=fast_forward).requests
    at_exits = simulate(w.replace(arrival=exits), SCHED, COST, 400, fast_forward=fast_forward).requests
    assert np.array_equal(with_front["request_id"], at_exits["request_id"])
    for col in ("first_token_s", "finish_s", "first_scheduled_s"):
        # equal up to rounding: simpy adds a delay to its clock, here exit - now, there send - now
        assert np.allclose(with_front[col], at_exits[col], rtol=0, atol=1e-9), col
    assert np.array_equal(with_front["arrival_s"], w.arrival[with_front["request_id"].astype(int)])
    ttft = with_front["first_token_s"] - with_front["arrival_s"]
    assert np.all(ttft >= front.delay_s + front.serial_s)


def test_no_front_end_and_an_empty_one_simulate_alike():
    w = workload()
    a = simulate(w, SCHED, COST, 400).requests
    b = simulate(w, SCHED, COST, 400, front_end=FrontEnd()).requests
    assert all(np.array_equal(a[c], b[c]) for c in ("first_token_s", "finish_s"))


def test_a_profile_carries_its_front_end_to_simulate(tmp_path):
    from batchlab.experiments.cli import main

    p = load_profile("batchlab-tiny-cpu")
    fitted = p.model_copy(update={"front_end": FrontEndParams(delay_s=0.05, serial_s=0.002, source="test")})
    path = tmp_path / "p.json"
    fitted.save(path)
    assert parse_profile(path.read_text()).front_end == fitted.front_end  # it round-trips
    outs = {}
    for name, prof in (("plain", "batchlab-tiny-cpu"), ("front", str(path))):
        out = tmp_path / name
        assert main(["simulate", "--profile", prof, "--num-requests", "30", "--rate", "1",
                     "--policy", "continuous",
                     "--seed", "4", "--out", str(out), "--format", "json"]) == 0
        outs[name] = out
    import json
    meta = json.loads((outs["front"] / "meta.json").read_text())["continuous"]
    assert meta["front_end_delay_ms"] == 50.0 and meta["front_end_serial_ms"] == 2.0
    summaries = {k: json.loads((v / "summary.json").read_text())["continuous"] for k, v in outs.items()}
    # Light load, requests far apart: the front end adds its delay and handling time to TTFT.
    gain = summaries["front"]["median_ttft_ms"] - summaries["plain"]["median_ttft_ms"]
    assert 50.0 <= gain < 60.0, gain
