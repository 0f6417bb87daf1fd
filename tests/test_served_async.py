"""Async scheduling in the served model (core/cost/served/host.py): the engine's host time
hidden behind the GPU's step up to its length, held off by default (the engine version the
shared rows ran), and a knob that prices an async engine."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.calibration.served_bench.fit import START, served_cost
from batchlab.core.cost.served.host import HOST_OVERLAP, overlapped
from batchlab.core.features import StepFeatures
from batchlab.experiments.config import build_config
from batchlab.experiments.setup import sim_setup
from batchlab.experiments.setup.knobs import price_knobs, with_knobs
from tests.test_served_formats import kernels


@given(gpu=st.floats(0.0, 1.0), host=st.floats(0.0, 1.0), a=st.floats(0.0, 1.0), b=st.floats(0.0, 1.0))
def test_overlap_hides_the_host_time_up_to_the_gpus_step(gpu, host, a, b):
    total = gpu + host
    assert overlapped(total, host, 0.0) == total  # synchronous: the sum
    assert abs(overlapped(total, host, 1.0) - max(gpu, host)) <= 1e-12  # async: the longer of the two
    lo, hi = sorted((a, b))
    assert overlapped(total, host, hi) <= overlapped(total, host, lo) + 1e-15  # more overlap, never slower
    assert overlapped(total, host, hi) >= max(gpu, host) - 1e-12  # never below either side


@settings(max_examples=10, deadline=None)
@given(seqs=st.integers(1, 64), kv=st.integers(16, 4096), step_ms=st.floats(0.05, 8.0))
def test_an_async_engine_prices_every_path_alike(seqs, kv, step_ms):
    p = kernels("llama-3.1-8b", "h200")
    sync = dataclasses.replace(START, step_s=step_ms * 1e-3)
    cost = served_cost(p, dataclasses.replace(sync, host_overlap=1.0))
    decode = StepFeatures(seqs, 0, 0, seqs, seqs * kv, seqs * kv)
    host = sync.step_s + sync.seq_s * seqs
    gpu = served_cost(p, sync).step_time(decode) - host
    assert abs(cost.step_time(decode) - max(gpu, host)) <= 1e-12
    # the fast-forward's decode runs price each step as step_time does
    run = [cost.step_time(decode._replace(kv_tokens_read=seqs * (kv + i), attention_pairs=seqs * (kv + i)))
           for i in range(3)]
    assert np.allclose(cost.decode_run_times(decode, 3), run, rtol=1e-12, atol=0)
    assert np.allclose(cost.decode_times(seqs, seqs * kv, 3), run, rtol=1e-12, atol=0)


def test_the_default_is_synchronous_and_the_knob_prices_an_async_engine():
    cfg = build_config({"model": {"name": "llama-3.1-8b"}, "workload": {"source": "chat", "num_requests": 10},
                        "hardware": {"name": "h100-sxm", "served_engine": "vllm"}})
    knob = {k.name: k for k in price_knobs(cfg, traffic=False)}["served_host_overlap"]
    assert (knob.value, knob.low, knob.high) == (0.0, 0.0, 1.0) and "01230b4" in knob.source
    decode = StepFeatures(4, 0, 0, 4, 4 * 300, 4 * 300)  # a small decode: the host time is a share of it
    sync = sim_setup(cfg)
    both = sim_setup(with_knobs(cfg, {"served_host_overlap": 1.0}))
    assert both.cost.step_time(decode) < sync.cost.step_time(decode)
    assert "not hidden: async scheduling off" in sync.meta.served_engine
    assert "100% of it hidden" in both.meta.served_engine
    assert HOST_OVERLAP.prior == 0.0


def test_vllm_schedules_asynchronously_by_default_from_014():
    from batchlab.core.cost.served.host import async_by_default
    assert [async_by_default(v) for v in ("0.18.0", "0.14.0", "v0.19.1", "1.0.0")] == [True] * 4
    assert [async_by_default(v) for v in ("0.13.0", "0.12.0", "0.11.2", "", "nightly", "0")] == [False] * 6


def test_a_row_of_an_async_engine_is_recorded_exactly_and_waits_a_step_more():
    """A 0.18 row is simulated with the admission lag (sim/admission.py): its recorded steps
    still give the simulation's means (record() checks that), and its TTFT is above the same
    row's on a 0.12 engine, TPOT near it."""
    from batchlab.calibration.served_bench.recorded import record
    from batchlab.experiments.validation.served_benchmarks import config_for, predict
    from tests.test_served_bench import row
    sync = dataclasses.replace(row(c=4, osl=400), engine_version="0.12.0")  # lengths apart
    lagged = dataclasses.replace(sync, engine_version="0.18.0")
    a, b = predict(sync, "perturbed", "none"), predict(lagged, "perturbed", "none")
    assert b.ttft_s > a.ttft_s * 1.05 and b.tpot_s == pytest.approx(a.tpot_s, rel=0.1)
    setup = sim_setup(config_for(lagged, "none"))
    rec = record(lagged, setup.cost, next(iter(setup.schedulers.values())), setup.blocks)
    ttft, tpot = rec.priced(setup.cost)
    assert ttft == pytest.approx(b.ttft_s, rel=1e-9) and tpot == pytest.approx(b.tpot_s, rel=1e-9)
