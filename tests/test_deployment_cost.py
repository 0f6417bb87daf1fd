"""The roofline of MoE, MLA and windowed models and of layouts beyond TP: each term
checked against the model's shapes computed here, the dense form recovered where a model
has none of them, and the windowed step features against brute-force counting."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.cost.dispatch import kv_capacity_blocks, roofline
from batchlab.core.cost.roofline import RooflineCostModel
from batchlab.core.cost.deployment import deployment_roofline, DeploymentRoofline
from batchlab.core.features import StepFeatures, window_pairs, window_reads
from batchlab.core.model.layout import Layout
from batchlab.core.model.hardware import HARDWARE, HardwareSpec
from batchlab.core.model.presets import MODELS

H100 = HARDWARE["h100-sxm"]
# A GPU whose compute is free (memory-bound steps) and one whose memory is (compute-bound).
MEM_BOUND = H100.model_copy(update={"peak_flops": 1e30, "peak_flops_fp8": 1e30})
FLOP_BOUND = H100.model_copy(update={"mem_bandwidth": 1e30})


def decode(n: int, context: int, window: int = 0) -> StepFeatures:
    kv = n * (context + 1)
    w = n * min(context + 1, window) if window else kv
    return StepFeatures(n, 0, 0, n, kv, kv, 0, 0, 0, w, w)


def test_a_dense_model_keeps_the_plain_roofline_and_the_general_form_agrees():
    m = MODELS["llama-3-70b"]
    plain = roofline(m, H100, 4, 0.8, 0.6, 0.002)
    assert isinstance(plain, RooflineCostModel)
    general = deployment_roofline(m, H100, Layout(tp=4), 0.8, 0.6, 0.002)
    for f in (decode(1, 100), decode(64, 3000), StepFeatures(3, 2, 5000, 1, 9000, 4_000_000)):
        f = f._replace(window_kv_tokens_read=f.kv_tokens_read, window_attention_pairs=f.attention_pairs)
        assert general.step_time(f) == pytest.approx(plain.step_time(f), rel=1e-9)


def test_moe_reads_the_experts_its_tokens_touch():
    m = MODELS["qwen3-30b-a3b"]
    cost = roofline(m, MEM_BOUND)
    assert isinstance(cost, DeploymentRoofline)
    dense = (m.non_expert_params + m.vocab_size * m.hidden_size) * m.dtype_bytes
    kv = m.kv_bytes_per_token * 11
    # One token touches exactly its k experts in every MoE layer.
    one = dense + m.moe_layers * m.experts_per_token * m.expert_params * m.dtype_bytes + kv
    assert cost.step_time(decode(1, 10)) * H100.mem_bandwidth == pytest.approx(one, rel=1e-9)
    # Many tokens touch every expert: all the weights but the embedding table.
    t = cost.step_time(decode(4096, 0)._replace(kv_tokens_read=0, window_kv_tokens_read=0))
    assert t * H100.mem_bandwidth == pytest.approx(m.params_read_per_step * m.dtype_bytes, rel=1e-6)
    # Expected experts touched by T tokens, E (1 - (1 - k/E)^T), in between.
    e, k, n = m.num_experts, m.experts_per_token, 8
    touched = e * (1 - (1 - k / e) ** n)
    mid = dense + m.moe_layers * touched * m.expert_params * m.dtype_bytes + m.kv_bytes_per_token * n * 11
    assert cost.step_time(decode(n, 10)) * H100.mem_bandwidth == pytest.approx(mid, rel=1e-9)


def test_moe_flops_come_from_the_active_parameters_and_mla_from_absorbed_attention():
    m = MODELS["deepseek-v3"]
    cost = roofline(m, FLOP_BOUND)
    f = decode(16, 999)
    pairs_flops = m.num_layers * 2 * m.num_heads * (2 * 512 + 64) * f.attention_pairs
    # fp8 weights run at the fp8 peak; attention's FLOPs are priced at the 16-bit one.
    expect = 2 * m.active_params * 16 / H100.peak_flops_fp8 + pairs_flops / H100.peak_flops
    assert cost.step_time(f) == pytest.approx(expect, rel=1e-9)


def test_mla_kv_is_replicated_under_tp_and_split_by_data_parallel_attention():
    m = MODELS["deepseek-v3"]
    h200 = HARDWARE["h200"]
    tp = roofline(m, h200, 8, layout=Layout(tp=8))
    dp = roofline(m, h200, 8, layout=Layout(tp=8, ep=8, dp_attention=True))
    assert tp.kv_bytes_per_token == m.kv_bytes_per_token  # every GPU reads the whole latent
    assert dp.kv_bytes_per_token == pytest.approx(m.kv_bytes_per_token / 8)
    blocks_tp = kv_capacity_blocks(m, h200, 8, 16, layout=Layout(tp=8))
    blocks_dp = kv_capacity_blocks(m, h200, 8, 16, layout=Layout(tp=8, ep=8, dp_attention=True))
    assert blocks_dp > 4 * blocks_tp
    assert dp.a2a_bytes_per_token > 0 and tp.a2a_bytes_per_token == 0


def test_windowed_layers_read_at_most_their_window():
    m = MODELS["gpt-oss-20b"]
    cost = roofline(m, MEM_BOUND)
    long, short = decode(8, 5000, m.window), decode(8, 5000)  # short: as if no window
    saved = (short.kv_tokens_read - long.window_kv_tokens_read) * cost.window_kv_bytes_per_token
    assert (cost.step_time(short) - cost.step_time(long)) * H100.mem_bandwidth == pytest.approx(saved)
    assert cost.window_kv_bytes_per_token == m.windowed_layers * m.kv_bytes_per_token_layer
    assert cost.kv_bytes_per_token == m.full_layers * m.kv_bytes_per_token_layer


def test_window_kv_capacity_counts_less_than_every_layer():
    m, hw = MODELS["gemma-3-27b"], HARDWARE["h200"]
    blocks = kv_capacity_blocks(m, hw, 1, 16, max_num_seqs=16)
    free = hw.memory_bytes * 0.9 - (m.params - m.vocab_size * m.hidden_size * 0) * 2
    every_layer = free // (m.kv_bytes_per_token * 16)
    assert blocks > every_layer  # the windows of 16 sequences are reserved, the rest is cheap
    assert kv_capacity_blocks(m, hw, 1, 16, max_num_seqs=100_000) >= every_layer - 1


def test_pipeline_stages_split_weights_and_pay_the_round_and_the_hops():
    m = MODELS["llama-3-70b"]
    pp1 = roofline(m, MEM_BOUND, 4, layout=Layout(tp=4))
    pp2 = roofline(m, MEM_BOUND, 4, layout=Layout(tp=4, pp=2))
    assert isinstance(pp2, DeploymentRoofline) and pp2.stages == 2
    assert pp2.weight_bytes == pytest.approx(pp1.weight_bytes / 2 + m.vocab_size * m.hidden_size * 2 / 4 / 2)
    # One sequence: one micro-batch goes round both stages (the other slot idles).
    f = decode(1, 100)
    hop = pp2.hop_latency_s + pp2.hop_bytes_per_token / pp2.comm_bandwidth
    stage = pp2.step_time(f) - hop - pp2.overhead_s
    assert stage > pp1.step_time(f) - pp1.overhead_s - 1e-12  # no faster than one stage holding all
    # Many sequences: two micro-batches keep both stages busy.
    assert pp2.step_time(decode(64, 100)) < 1.2 * pp1.step_time(decode(64, 100)) + 2 * hop


@pytest.mark.parametrize("layout, model, words", [
    (Layout(tp=3), "llama-3-8b", "tensor_parallel=3"),
    (Layout(tp=2, pp=200), "llama-3-8b", "pipeline_parallel=200"),
    (Layout(tp=2, ep=2), "llama-3-8b", "no experts"),
    (Layout(tp=4, ep=2), "qwen3-30b-a3b", "must equal"),
    (Layout(tp=3, ep=3), "mixtral-8x7b", "tensor_parallel=3"),
    (Layout(tp=1, dp_attention=True), "deepseek-v3", "data_parallel_attention"),
])
def test_a_layout_that_does_not_fit_is_one_line(layout, model, words):
    with pytest.raises(ValueError, match=words) as e:
        roofline(MODELS[model], H100, layout.tp, layout=layout)
    assert "\n" not in str(e.value)


def test_experts_must_divide_over_expert_parallel():
    m = MODELS["mixtral-8x7b"].model_copy(update={"num_experts": 6, "num_heads": 36, "num_kv_heads": 12})
    with pytest.raises(ValueError, match="does not divide .* 6 experts"):
        Layout(tp=4, ep=4).check(m)


@settings(max_examples=300, deadline=None)
@given(chunk=st.integers(1, 60), cached=st.integers(0, 200), window=st.integers(1, 120))
def test_window_counts_match_brute_force(chunk, cached, window):
    keys = [set(range(max(0, p - window + 1), p + 1)) for p in range(cached, cached + chunk)]
    assert window_pairs(chunk, cached, window) == sum(len(k) for k in keys)
    assert window_reads(chunk, cached, window) == len(set().union(*keys))
    if window >= cached + chunk:  # the window covers everything: the full counts
        assert window_pairs(chunk, cached, window) == chunk * cached + chunk * (chunk + 1) // 2


def test_a_custom_gpu_without_fp8_refuses_fp8_weights():
    gpu = HardwareSpec(name="old", memory_bytes=16e9, mem_bandwidth=900e9, peak_flops=100e12)
    with pytest.raises(ValueError, match="no fp8"):
        roofline(MODELS["deepseek-v3"], gpu)


def _steps(out) -> list[dict[str, float]]:
    import csv
    files = sorted(out.rglob("steps.csv"))
    assert files
    with open(files[0], newline="") as f:
        return [{k: float(v) for k, v in row.items() if v not in ("",)} for row in csv.DictReader(f)]


@pytest.mark.parametrize("model, windowed", [("gpt-oss-20b", True), ("qwen3-30b-a3b", False)])
def test_simulated_steps_carry_the_windowed_features(model, windowed, tmp_path):
    from tests.helpers import cli
    code, _, err = cli(["simulate", "--model", model, "--hardware", "h100-sxm", "--num-requests", "12",
                        "--rate", "inf", "--out", str(tmp_path)])
    assert code == 0, err
    steps = _steps(tmp_path)
    less = 0
    for s in steps:
        assert s["window_kv_tokens_read"] <= s["kv_tokens_read"]
        assert s["window_attention_pairs"] <= s["attention_pairs"]
        less += s["window_kv_tokens_read"] < s["kv_tokens_read"]
        if not windowed:
            assert s["window_kv_tokens_read"] == s["kv_tokens_read"]
    assert (less > 0) == windowed


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-120b", "deepseek-v2-lite"]),
       n=st.integers(1, 512), context=st.integers(0, 8000), more=st.integers(1, 64))
def test_moe_steps_cost_more_with_more_tokens_but_never_past_all_experts(name, n, context, more):
    m = MODELS[name]
    cost = roofline(m, MEM_BOUND)
    a, b = decode(n, context, m.window), decode(n + more, context, m.window)
    assert cost.step_time(b) >= cost.step_time(a)
    # The expert part of the read never exceeds every expert's weights.
    kv = (cost.kv_bytes_per_token * b.kv_tokens_read + cost.window_kv_bytes_per_token * b.window_kv_tokens_read)
    experts_read = cost.step_time(b) * H100.mem_bandwidth - cost.weight_bytes - kv
    assert experts_read <= cost.expert_bytes * cost.experts_here * (1 + 1e-9)
    assert experts_read >= cost.expert_bytes * m.experts_per_token * (1 - 1e-9)


@settings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]), seqs=st.integers(1, 300))
def test_a_pipeline_round_reads_every_weight_at_least_once(tp, pp, seqs):
    m = MODELS["llama-3-70b"]
    one = roofline(m, H100, tp, 0.8, 0.6, 0.002, layout=Layout(tp=tp))
    staged = deployment_roofline(m, H100, Layout(tp=tp, pp=pp), 0.8, 0.6, 0.002)
    f = decode(seqs, 500)
    # Each GPU's round: its stage's weights once per micro-batch, pp slots in all, so at
    # least every weight of a TP group once: a pipeline never reads the weights fewer times.
    assert staged.step_time(f) - staged.overhead_s >= one.weight_bytes / one.mem_bandwidth * (1 - 1e-9)
    if pp > 1 and seqs == 1:  # one micro-batch: the round is pp stages one after another
        assert staged.step_time(f) >= one.step_time(f) - one.overhead_s - 1e-12


def test_mla_prefill_pairs_are_priced_with_the_projections_applied():
    m = MODELS["deepseek-v3"]
    cost = roofline(m, FLOP_BOUND)
    c = 4096
    pairs = c * (c + 1) // 2
    f = StepFeatures(1, 1, c, 0, c, pairs, 0, 0, 0, c, pairs, pairs)
    absorbed, applied = 2 * 128 * (2 * 512 + 64), 2 * 128 * (192 + 128)
    expect = 2 * m.active_params * c / H100.peak_flops_fp8 + m.num_layers * applied * pairs / H100.peak_flops
    assert cost.step_time(f) == pytest.approx(expect, rel=1e-9)
    assert applied < absorbed  # prefill is cheaper per pair than a decode's absorbed attention
    # A dense model prices both kinds of pair alike.
    dense = roofline(MODELS["qwen3-30b-a3b"], FLOP_BOUND)
    assert dense.step_time(f) == dense.step_time(f._replace(prefill_attention_pairs=0))


def test_step_features_count_the_prefill_chunks_pairs():
    from batchlab.core.batch import Batch, step_features
    from batchlab.core.request import Request, Sequence
    batch = Batch()
    chunk = Sequence(Request(0, 0.0, 100, 5))
    chunk.num_computed = 40
    batch.add(chunk, 30)  # a chunk of 30 after 40 cached
    f = step_features(batch)
    assert f.prefill_attention_pairs == f.attention_pairs == 30 * 40 + 30 * 31 // 2


def test_a_table_before_the_prefill_pairs_gets_a_safe_estimate(tmp_path):
    """Step tables written before prefill_attention_pairs: exact on decode-only steps and
    steps whose chunks start at 0, never above the truth elsewhere."""
    import numpy as np

    from tests.profiles import BASE, served_table
    from batchlab.core.run_folder import read_steps, write_table
    steps = served_table(BASE, seed=3, n=30)
    assert "prefill_attention_pairs" in steps
    path = tmp_path / "steps.csv"
    write_table(path, {k: v for k, v in steps.items() if k != "prefill_attention_pairs"})
    got = read_steps(path, "old")["prefill_attention_pairs"]
    true = np.asarray(steps["prefill_attention_pairs"], dtype=float)
    decode_only = np.asarray(steps["num_prefill_seqs"]) == 0
    assert decode_only.any() and (~decode_only).any()
    assert np.array_equal(got[decode_only], true[decode_only])
    assert (got <= true).all() and (got[~decode_only] > 0).any()
