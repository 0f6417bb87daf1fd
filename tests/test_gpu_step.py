"""The default price's flattened step (core/cost/gpu_step.py) prices every step, decode run
and decode stretch bit for bit as the GPU form it flattens (the simulator's outputs must
not move when the price is compiled), and the served price asks it only for dense forms."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.cost.dispatch import gpu_cost, operator_shapes
from batchlab.core.cost.form import stretch_times
from batchlab.core.cost.gpu_form import AllReduce, GpuCostModel, GpuCostParams
from batchlab.core.cost.gpu_step import KEPT_TOKENS, DenseGpuStep
from batchlab.core.cost.served.allreduce import EngineAllReduce
from batchlab.core.cost.served.model import ServedGpuCost
from batchlab.core.cost.served.engine import VLLM
from batchlab.core.cost.served.terms import ServedTerms
from batchlab.core.features import StepFeatures, features_of
from batchlab.core.run_clock import RunClock
from batchlab.core.model.presets import MODELS, lookup_hardware

PARAMS = GpuCostParams(mem_efficiency=0.85, compute_efficiency=0.7, ridge_k=1.5, gemm_fixed_s=6e-6,
                       layer_fixed_s=6e-6, elementwise_efficiency=0.6, elementwise_row_efficiency=0.006,
                       attn_layer_s=15e-6, attn_seq_s=0.5e-6, attn_kv_efficiency=0.9,
                       attn_pair_efficiency=0.3, step_s=1e-3, seq_s=10e-6, gemm_tile_tokens=64.0,
                       attn_self_pair_cost=2.5, attn_prefill_token_s=3e-8)
TABLE = {2: ((1e4, 1e6, 1e8), (20e-6, 40e-6, 1e-3)), 4: ((1e4, 1e7), (25e-6, 90e-6))}
ALLREDUCES = [AllReduce(TABLE, latency_s=30e-6, bandwidth=100e9),
              EngineAllReduce(TABLE, 30e-6, 100e9, custom_scale=0.4, custom_below=2e6, symm_below=5e7)]
TERMS = ServedTerms(graph_fixed_share=0.3, custom_allreduce_scale=0.5, symm_mem_efficiency=0.6,
                    attention_speedup=1.5, elementwise_share=0.5, bf16_gemm_speedup=1.1, step_s=2e-4, seq_s=3e-6)


def form(model: str, tp: int, allreduce: int = 0) -> GpuCostModel:
    h = lookup_hardware("h100-sxm")
    return gpu_cost(operator_shapes(MODELS[model], tp), PARAMS, h.mem_bandwidth, h.peak_flops, h.peak_flops,
                    ALLREDUCES[allreduce])


def features(n: int, prefill: int, kv: int, chunks: int) -> StepFeatures:
    """A step of n sequences, `chunks` of them prefilling `prefill` tokens between them."""
    chunks = min(chunks, n) if prefill else 0
    self_pairs = prefill * (prefill + 1) // 2
    return StepFeatures(n, chunks, prefill, n - chunks, kv + prefill, kv + self_pairs,
                        prefill_attention_pairs=self_pairs, prefill_self_pairs=self_pairs)


steps = st.tuples(st.integers(1, 600), st.integers(0, 9000), st.integers(0, 3_000_000), st.integers(1, 4))


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(["llama-3-8b", "llama-3-70b", "llama-2-7b"]), tp=st.sampled_from([1, 2, 4, 8]),
       allreduce=st.sampled_from([0, 1]), shapes=st.lists(steps, min_size=1, max_size=12),
       m=st.integers(0, 120))
def test_the_flattened_step_prices_as_the_form_bit_for_bit(model, tp, allreduce, shapes, m):
    c = form(model, tp, allreduce)
    flat = DenseGpuStep.of(c)
    for _ in range(2):  # priced, then from what it kept
        for n, prefill, kv, chunks in shapes:
            f = features(n, prefill, kv, chunks)
            assert flat.step_time(f) == c.step_time(f)  # exactly, not approximately
            assert np.array_equal(flat.decode_run_times(f, m), c.decode_run_times(f, m))
            assert flat.decode_times(n, kv, m) == c.decode_times(n, kv, m)


def test_steps_past_what_it_keeps_are_priced_the_same():
    c = form("llama-3-8b", 2)
    flat = DenseGpuStep.of(c)
    for f in (features(3, KEPT_TOKENS + 5, 100, 1), features(KEPT_TOKENS + 1, 0, 10**7, 1)):
        assert flat.step_time(f) == c.step_time(f)


@pytest.mark.parametrize("model,tp,flattened", [("llama-3-8b", 1, True), ("llama-3-70b", 4, True),
                                                ("gpt-oss-20b", 1, False)])
def test_the_served_price_is_its_forms_whichever_way_it_asks_them(model, tp, flattened):
    """Dense forms through their flattened step; any other (DeployedGpuCost) itself."""
    served = ServedGpuCost.build(form(model, tp), TERMS, VLLM, 64, "h100-sxm", True)
    assert (served.graph_step is not None) == flattened
    assert served.max_capture_tokens == 128
    for n, prefill in ((1, 0), (64, 0), (100, 0), (200, 0), (3, 90), (8, 500)):  # graph, eager, piecewise
        f = features(n, prefill, 5000, 1)
        assert served.step_time(f) == served._form(f).step_time(f)
        assert np.array_equal(served.decode_run_times(f, 70), served._form(f).decode_run_times(f, 70))
        if not prefill:
            for m in (1, 5, 50):  # as FormDefaults asked the served price before it was flattened
                assert served.decode_times(n, 5000, m) == stretch_times(served, n, 5000, m)
                if flattened:
                    assert served.decode_times(n, 5000, m) == [served.step_time(features(n, 0, kv, 1))
                                                               for kv in range(5000, 5000 + m * n, n)]
    again = pickle.loads(pickle.dumps(served))  # a process pool's or Dask's copy
    assert (again.graph_step is not None) == flattened and again == served
    assert [again.step_time(features(n, 9, 700, 1)) for n in (1, 300)] == \
        [served.step_time(features(n, 9, 700, 1)) for n in (1, 300)]
    slower = served.at_speed(2.0)
    assert (slower.graph_step is not None) == flattened
    f = features(8, 0, 5000, 1)
    assert slower.step_time(f) == slower.graph.step_time(f) > served.step_time(f)


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(["llama-3-8b", "llama-3-70b", "gpt-oss-20b"]), tp=st.sampled_from([1, 2, 4]),
       n=st.integers(1, 300), kv=st.integers(0, 3_000_000), after_prefill=st.integers(0, 1),
       after_idle=st.integers(0, 1), overlap=st.sampled_from([0.0, 0.0, 0.5]))
def test_a_price_that_says_its_decodes_ignore_their_context_prices_them_on_the_line(
        model, tp, n, kv, after_prefill, after_idle, overlap):
    """decode_reads_context() False (sim/engine.py then prices a run's first step, after a
    prefill or an idle gap, on its stretch's line): step_time of a decode-only step, whatever
    its context, is decode_into's value for it, to the bit."""
    served = ServedGpuCost.build(form(model, tp), TERMS, VLLM, 64, "h100-sxm", True)
    if overlap:
        served = ServedGpuCost(served.graph, served.piecewise, served.eager, served.max_capture_tokens, overlap)
    assert served.decode_reads_context() == (served.graph_step is None or bool(overlap))
    assert form(model, tp).decode_reads_context()  # the default: asked, not assumed
    if served.decode_reads_context():
        return
    clock = RunClock(0.0)
    served.decode_into(clock, n, kv, 2)
    # the first step's features as core/fast_forward.py's decode_run builds them
    first = features_of(n, 0, 0, n, kv, kv, after_prefill, after_idle, 0, 0, 0, 0, 0)
    assert clock.durations()[0] == served.step_time(first)
    assert clock.durations()[1] == served.step_time(features_of(n, 0, 0, n, kv + n, kv + n, 0, 0, 0, 0, 0, 0, 0))
