"""The GPU cost form (core/cost/gpu_form.py) and the per-GPU operator shapes it prices
(core/cost/operator_shapes.py): shapes add up to the model, the form's decode runs equal its
steps bit for bit, the ridge sits between max and sum, the all-reduce table interpolates,
and the calibration's vectorised prices are the form's own."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.calibration.operators.fit import LayerArrays, layer_prices
from batchlab.calibration.operators.vidur import LayerTiming
from batchlab.core.features import StepFeatures
from batchlab.core.cost.dispatch import gpu_cost, operator_shapes
from batchlab.core.cost.gpu_form import AllReduce, gemm_rows, GpuCostParams, smooth
from batchlab.core.model.presets import lookup_hardware, MODELS

PARAMS = GpuCostParams(mem_efficiency=0.85, compute_efficiency=0.7, ridge_k=1.5, gemm_fixed_s=6e-6,
                       layer_fixed_s=6e-6, elementwise_efficiency=0.6, elementwise_row_efficiency=0.006,
                       attn_layer_s=15e-6, attn_seq_s=0.5e-6, attn_kv_efficiency=0.9,
                       attn_pair_efficiency=0.3, step_s=1e-3, seq_s=10e-6)
TABLE = AllReduce({2: ((1e4, 1e6, 1e8), (20e-6, 40e-6, 1e-3))}, latency_s=30e-6, bandwidth=100e9)


def cost(model="llama-3-70b", tp=4, hw="h100-sxm", params=PARAMS):
    h = lookup_hardware(hw)
    return gpu_cost(operator_shapes(MODELS[model], tp), params, h.mem_bandwidth, h.peak_flops,
                    h.peak_flops, TABLE)


@pytest.mark.parametrize("name", ["llama-2-7b", "llama-3-70b", "qwen2.5-7b"])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_shapes_add_up_to_the_models_weights_and_flops(name, tp):
    m = MODELS[name]
    s = operator_shapes(m, tp)
    norms = 2 * m.hidden_size  # two RMSNorm weight vectors per layer: not GEMMs
    kv_replicas = tp // min(tp, m.num_kv_heads)  # heads replicated where tp exceeds them
    assert kv_replicas == 1  # these models' KV heads split at these TP degrees
    assert s.layers * s.weight_bytes_per_layer * tp == pytest.approx(
        m.num_layers * (m.layer_params - norms) * m.dtype_bytes)
    assert s.head.weight_bytes * tp == pytest.approx(m.vocab_size * m.hidden_size * m.dtype_bytes)
    assert (s.layers * s.flops_per_token_per_layer + s.head.flops_per_token) * tp == pytest.approx(
        m.flops_per_token - 2 * m.num_layers * norms - 2 * m.hidden_size)
    assert s.layers * s.kv_bytes_per_token * tp == pytest.approx(m.kv_bytes_per_token)
    assert s.layers * s.attn_flops_per_pair * tp == pytest.approx(m.attention_flops_per_pair)
    assert s.allreduces_per_layer == (2 if tp > 1 else 0)
    assert s.experts.experts == 0 and s.window_layers == 0 and s.send_recv_bytes_per_token == 0


def test_norms_and_residual_do_not_shrink_with_tp():
    m = MODELS["llama-3-70b"]
    one, eight = operator_shapes(m, 1), operator_shapes(m, 8)
    fixed = (4 * m.hidden_size + 3 * m.hidden_size) * 2  # two norms, a residual add
    assert eight.elementwise_bytes_per_token > fixed
    assert eight.elementwise_bytes_per_token > one.elementwise_bytes_per_token / 8
    assert eight.kv_bytes_per_token == one.kv_bytes_per_token / 8


def test_kv_heads_are_replicated_where_tp_exceeds_them():
    m = MODELS["llama-3-8b"]  # 32 heads, 8 KV heads
    s = operator_shapes(m, 16)
    assert s.kv_bytes_per_token == 2 * 1 * m.head_dim * 2  # one KV head per GPU
    assert s.attn_flops_per_pair == 4 * 2 * m.head_dim  # two query heads per GPU
    with pytest.raises(ValueError, match="does not split"):
        operator_shapes(MODELS["qwen2.5-0.5b"], 4)  # 14 heads


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 512), kv=st.integers(0, 2_000_000), m=st.integers(0, 80),
       prefill=st.integers(0, 4096), tp=st.sampled_from([1, 2, 4, 8]),
       after=st.sampled_from([(0, 0), (1, 0), (0, 1)]))
def test_decode_runs_equal_their_steps_bit_for_bit(n, kv, m, prefill, tp, after):
    c = cost(tp=tp)
    f = StepFeatures(n, 1 if prefill else 0, prefill, n, kv, kv + prefill * prefill, *after)
    run = c.decode_run_times(f, m)
    assert len(run) == m
    for i, t in enumerate(run):
        step = f._replace(kv_tokens_read=f.kv_tokens_read + i * n, attention_pairs=f.attention_pairs + i * n)
        assert t == c.step_time(step)  # exactly, not approximately
    assert c.decode_times(n, kv, m) == [c.step_time(StepFeatures(n, 0, 0, n, x, x))
                                        for x in range(kv, kv + m * n, n)]


@settings(max_examples=100, deadline=None)
@given(a=st.floats(1e-9, 1.0), b=st.floats(1e-9, 1.0), k=st.floats(1.0, 40.0))
def test_the_ridge_lies_between_max_and_sum(a, b, k):
    s = smooth(a, b, k)
    assert max(a, b) * (1 - 1e-12) <= s <= (a + b) * (1 + 1e-12)


def test_the_ridge_is_the_sum_at_k_1_and_nears_the_max_as_k_grows():
    assert smooth(2.0, 3.0, 1.0) == pytest.approx(5.0)
    assert smooth(2.0, 3.0, 200.0) == pytest.approx(3.0, rel=1e-3)


def test_more_tokens_more_kv_and_more_sequences_cost_more():
    c = cost()
    base = c.step_time(StepFeatures(8, 0, 0, 8, 8000, 8000))
    assert c.step_time(StepFeatures(8, 1, 512, 8, 8000, 8000 + 512 * 256)) > base
    assert c.step_time(StepFeatures(8, 0, 0, 8, 80000, 80000)) > base
    assert c.step_time(StepFeatures(64, 0, 0, 64, 8000, 8000)) > base


def test_tp_shrinks_a_decode_step_but_not_by_the_tp_degree():
    one = cost(tp=1).step_time(StepFeatures(16, 0, 0, 16, 16000, 16000))
    four = cost(tp=4).step_time(StepFeatures(16, 0, 0, 16, 16000, 16000))
    assert one / 4 < four < one


def test_at_speed_slows_the_memory_side_and_the_compute_side_apart():
    c = cost(tp=1)
    decode, prefill = StepFeatures(1, 0, 0, 1, 100, 100), StepFeatures(1, 1, 8192, 0, 8192, 8192 * 4096)
    assert c.at_speed(1.0).step_time(decode) == pytest.approx(c.step_time(decode))
    assert c.at_speed(2.0, 1.0).step_time(decode) == pytest.approx(2 * c.step_time(decode), rel=0.02)
    slow_compute = c.at_speed(1.0, 2.0).step_time(prefill) / c.step_time(prefill)
    assert 1.6 < slow_compute < 2.0  # the prefill is mostly FLOPs; its fixed costs stay
    assert c.at_speed(1.0, 2.0).step_time(decode) == pytest.approx(c.step_time(decode), rel=0.02)


def test_the_all_reduce_table_interpolates_in_log_log_and_falls_back_elsewhere():
    assert TABLE.time(1e6, 2) == pytest.approx(40e-6)
    mid = TABLE.time(1e7, 2)  # halfway in log size: the geometric mean of the neighbours
    assert mid == pytest.approx(math.sqrt(40e-6 * 1e-3))
    assert TABLE.time(10, 2) == 20e-6  # below the table: its smallest message's time
    assert TABLE.time(2e8, 2) == pytest.approx(2e-3)  # beyond it: at the last bandwidth
    assert TABLE.time(1e6, 4) == pytest.approx(30e-6 + 1.5 * 1e6 / 100e9)  # not measured: ring
    assert TABLE.time(1e6, 1) == 0.0


def test_the_calibrations_vectorised_prices_are_the_forms():
    m = MODELS["llama-3-8b"].model_copy(update={"num_layers": 1})
    rows = [LayerTiming("x", operator_shapes(m, tp), t, (1.0, 1.0, 1.0, 1.0), 1.0)
            for tp in (1, 2, 8) for t in (1, 100, 333, 4096)]
    x = [getattr(PARAMS, n) for n in ("mem_efficiency", "compute_efficiency", "ridge_k", "gemm_fixed_s",
                                      "layer_fixed_s", "elementwise_efficiency", "elementwise_row_efficiency")]
    h = lookup_hardware("a100-80gb")
    g, e = layer_prices(x, LayerArrays.of(rows), h.mem_bandwidth, h.peak_flops)
    for r, priced in zip(rows, g.sum(axis=1) + e):
        form = gpu_cost(r.shapes, PARAMS, h.mem_bandwidth, h.peak_flops, h.peak_flops, TABLE)
        assert priced == pytest.approx(form.layer_time(r.tokens), rel=1e-12)
    assert np.all(np.isfinite(g))


def test_gemms_past_one_tile_compute_whole_tiles():
    assert [gemm_rows(t, 128) for t in (1, 127, 128, 129, 256, 257)] == [1, 127, 128, 256, 256, 384]
    assert [gemm_rows(t, 64) for t in (1, 128, 129, 192, 193)] == [1, 128, 192, 192, 256]
    c = cost(tp=1)
    steps = [c.step_time(StepFeatures(1, 1, t, 0, t, t * (t + 1) // 2)) for t in (130, 200, 256, 260)]
    assert steps[2] - steps[0] < steps[3] - steps[2]  # flat within a tile, a step past it
