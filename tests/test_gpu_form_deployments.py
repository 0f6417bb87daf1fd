"""The GPU cost form prices mixtures of experts, latent attention, sliding windows and
PP/EP/DP-attention layouts (core/cost/deployment_shapes.py, core/cost/gpu_deployment.py):
a dense model at TP prices exactly as before, the new terms add up to the model's
weights and FLOPs, and the properties the structure implies hold (a MoE routing every
token to every expert is a dense MLP of their width; EP halves the experts a GPU reads;
a window stops the price growing; one stage is no pipeline; more tokens or KV never cost
less); the setup prices these models by the GPU profile, not the roofline."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.cost import gpu_deployment as deployed
from batchlab.core.model.layout import kv_shards
from batchlab.core.cost.deployment import deployment_kv_blocks, DeploymentRoofline
from batchlab.core.features import StepFeatures, window_pairs, window_reads
from batchlab.core.cost.gpu_form import gemm_rows, GpuCostModel, smooth
from batchlab.core.cost.served.model import ServedGpuCost
from batchlab.core.cost.gpu_profile import load_gpu_profile
from batchlab.core.model.layout import Layout
from batchlab.core.cost.dispatch import operator_shapes
from batchlab.core.cost.deployment_shapes import deployed_shapes
from batchlab.core.model.hardware import HARDWARE
from batchlab.core.model.presets import MODELS
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.setup import sim_setup
from tests.helpers import cli

H100 = HARDWARE["h100-sxm"]
PROFILE = load_gpu_profile("h100-sxm")


def priced(model, layout, hw=H100, profile=PROFILE) -> GpuCostModel:
    return profile.cost(model, layout, hw)


def decode(n: int, context: int, window: int = 0) -> StepFeatures:
    """n sequences each decoding one token after `context` cached ones."""
    kv = n * (context + 1)
    w = n * window_reads(1, context, window) if window else kv
    wp = n * window_pairs(1, context, window) if window else kv
    return StepFeatures(n, 0, 0, n, kv, kv, 0, 0, 0, w, wp)


def prefill(chunk: int, cached: int = 0, window: int = 0, decodes: int = 0, context: int = 0) -> StepFeatures:
    """One prefill chunk after `cached` tokens, beside `decodes` decoding sequences."""
    pairs = chunk * cached + chunk * (chunk + 1) // 2
    kv = cached + chunk + decodes * (context + 1)
    w_kv = (window_reads(chunk, cached, window) + decodes * window_reads(1, context, window)) if window else kv
    w_pairs = (window_pairs(chunk, cached, window) + decodes * window_pairs(1, context, window)) if window \
        else pairs + decodes * (context + 1)
    return StepFeatures(1 + decodes, 1, chunk, decodes, kv, pairs + decodes * (context + 1), 0, 0, 0,
                        w_kv, w_pairs, pairs, prefill_self_pairs=chunk * (chunk + 1) // 2)


# -- a dense model at TP: exactly the pre-issue-30 price ---------------------------------

def reference_step(model, tp: int, hw, profile, f: StepFeatures) -> float:
    """The form as it priced a dense model at TP before MoE / window / layout terms
    existed, written out from the model (frozen: the shapes and the arithmetic in the
    order core/cost/gpu_form.py used), with the prefill chunks' own attention terms."""
    p = profile.cost_params()
    ar = profile.allreduce()
    shards = kv_shards(model, tp)
    h, hd, b = model.hidden_size, model.head_dim, model.dtype_bytes
    q_heads, kv_heads, inter = model.num_heads // tp, model.num_kv_heads // shards, model.intermediate_size / tp
    gemms = [(h, (q_heads + 2 * kv_heads) * hd), (q_heads * hd, h), (h, 2 * inter), (inter, h)]
    act = model.activation_bytes
    e = (2 * (2 * h) + 3 * h + 2 * (q_heads + kv_heads) * hd + 3 * inter) * act
    kv_b = model.kv_dtype_bytes or model.dtype_bytes
    peak = hw.flops_for("fp8" if model.dtype_bytes == 1 else "bf16")
    b_mem, pk = hw.mem_bandwidth * p.mem_efficiency, peak * p.compute_efficiency

    def gemm(mem, flop, tokens):
        return smooth(mem, flop * gemm_rows(tokens, p.gemm_tile_tokens), p.ridge_k) + p.gemm_fixed_s

    tokens = f.prefill_tokens + f.decode_tokens
    layer = (p.layer_fixed_s + e / (hw.mem_bandwidth * p.elementwise_row_efficiency)
             + e * tokens / (hw.mem_bandwidth * p.elementwise_efficiency)) + p.attn_layer_s + p.attn_seq_s * f.num_seqs
    for n_in, n_out in gemms:
        layer += gemm(n_in * n_out * b / b_mem, 2.0 * n_in * n_out / pk, tokens)
    if tp > 1:
        layer += 2 * p.allreduce_scale * ar.time(tokens * float(h * act), tp)
    head = gemm(h * (model.vocab_size / tp) * b / b_mem, 2.0 * h * (model.vocab_size / tp) / pk, f.num_seqs)
    base = p.step_s + p.seq_s * f.num_seqs + model.num_layers * layer + head
    kv_coef = model.num_layers * (2.0 * kv_heads * hd * kv_b) / (hw.mem_bandwidth * p.attn_kv_efficiency)
    pair_coef = model.num_layers * (4.0 * q_heads * hd) / (hw.flops_for("bf16") * p.attn_pair_efficiency)
    # a chunk's own pairs and tokens (the attention terms of issue 28; 1 and 0: none); a_tok
    # per the query heads a GPU holds, against the table's 32 of 128 (issue 42)
    base += (pair_coef * (p.attn_self_pair_cost - 1) * f.prefill_self_pairs
             + model.num_layers * p.attn_prefill_token_s * (q_heads * hd / (32 * 128)) * f.prefill_tokens)
    return base + (kv_coef * f.kv_tokens_read + pair_coef * f.attention_pairs)


DENSE = [("llama-3-8b", 1), ("llama-3-8b", 2), ("llama-3-70b", 4), ("llama-3-70b", 8), ("qwen2.5-7b", 4)]


@settings(max_examples=40, deadline=None)
@given(case=st.sampled_from(DENSE), gpu=st.sampled_from(["h100-sxm", "a100-80gb"]),
       seqs=st.integers(1, 300), chunk=st.integers(0, 9000), context=st.integers(0, 30000))
def test_a_dense_model_at_tp_prices_exactly_as_before(case, gpu, seqs, chunk, context):
    name, tp = case
    model, hw, profile = MODELS[name], HARDWARE[gpu], load_gpu_profile(gpu)
    f = decode(seqs, context) if not chunk else prefill(chunk, context % 4096, decodes=seqs - 1, context=context)
    want = reference_step(model, tp, hw, profile, f)
    for layout in (tp, Layout(tp=tp)):
        c = profile.cost(model, layout, hw)
        assert c.step_time(f) == want  # bit for bit
    if not chunk:
        assert c.decode_run_times(f, 3)[0] == want


# -- the shapes add up to the model ----------------------------------------------------

@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b", "mixtral-8x7b", "llama-4-scout"])
def test_moe_and_mla_shapes_add_up_to_the_models_weights_and_active_flops(name):
    m = MODELS[name]
    s = operator_shapes(m, 1)
    e = s.experts

    def total(gs, attr):
        return sum(getattr(g, attr) for g in gs)

    weights = (s.layers * total(s.gemms, "weight_bytes") + s.dense_mlp_layers * total(s.dense_mlp_gemms, "weight_bytes")
               + s.moe_layers * (total(s.moe_gemms, "weight_bytes") + e.experts * e.expert_bytes) + s.head.weight_bytes)
    norms = (2 * m.num_layers + 1) * m.hidden_size  # RMSNorm vectors: not GEMMs
    embed = m.vocab_size * m.hidden_size * (0 if m.tied_embeddings else 1)
    assert weights == pytest.approx(m.weight_bytes - (norms + embed) * m.dtype_bytes, rel=1e-9)
    flops = (s.layers * total(s.gemms, "flops_per_token") + s.dense_mlp_layers * total(s.dense_mlp_gemms, "flops_per_token")
             + s.moe_layers * (total(s.moe_gemms, "flops_per_token") + e.top_k * e.expert_flops_per_token)
             + s.head.flops_per_token)
    assert flops == pytest.approx(m.flops_per_token - 2 * norms, rel=1e-9)
    assert s.layers * s.kv_bytes_per_token == m.kv_bytes_per_token
    assert s.window_layers == m.windowed_layers and s.window_tokens == m.window


def test_mla_reads_the_whole_latent_under_tp_and_a_share_under_dp_attention():
    m = MODELS["deepseek-v3"]
    tp, dp = operator_shapes(m, Layout(tp=8)), operator_shapes(m, Layout(tp=8, ep=8, dp_attention=True))
    assert tp.kv_bytes_per_token == m.kv_bytes_per_token_layer  # one latent KV head: every GPU holds it
    assert dp.kv_bytes_per_token == pytest.approx(m.kv_bytes_per_token_layer / 8)
    assert tp.prefill_attn_flops_per_pair < tp.attn_flops_per_pair  # applied projections: fewer FLOPs a pair
    c = priced(m, Layout(tp=8), HARDWARE["h200"])
    f = prefill(4096)
    absorbed = f._replace(prefill_attention_pairs=0)  # every pair priced as a decode's
    assert c.step_time(f) < c.step_time(absorbed)


# -- properties ------------------------------------------------------------------------

def moe_variant(experts: int, width: int, tp: int):
    """llama-3-8b with every layer's MLP as `experts` experts of `width`, all routed to
    (top-k = E), and the dense model of the same total width."""
    base = MODELS["llama-3-8b"]
    moe = base.model_copy(update={"name": "all-experts", "num_experts": experts, "experts_per_token": experts,
                                  "expert_intermediate_size": width, "moe_layers": base.num_layers})
    dense = base.model_copy(update={"name": "same-width", "intermediate_size": experts * width})
    return priced(moe, Layout(tp=tp)), priced(dense, Layout(tp=tp))


@settings(max_examples=30, deadline=None)
@given(experts=st.sampled_from([2, 4, 8]), width=st.sampled_from([512, 1024, 1792]), tp=st.sampled_from([1, 2, 4]),
       tokens=st.integers(1, 20000))
def test_experts_all_routed_to_price_as_a_dense_mlp_of_their_width(experts, width, tp, tokens):
    moe, dense = moe_variant(experts, width, tp)
    e = moe.shapes.experts
    assert e.experts * e.expert_bytes == pytest.approx(sum(g.weight_bytes for g in dense.shapes.gemms[2:]), rel=1e-12)
    d = moe.terms
    router = sum(moe._gemm(mem, flop, tokens) for mem, flop in d.moe)
    experts_time = deployed._moe_layer(moe, d, tokens) - router
    mlp = sum(dense._gemm(mem, flop, tokens) for mem, flop in zip(dense._gemm_mem[2:], dense._gemm_flop[2:]))
    assert experts_time == pytest.approx(mlp, rel=1e-9)


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "deepseek-v3", "mixtral-8x7b"])
def test_ep_halves_the_expert_bytes_a_gpu_reads(name):
    m = MODELS[name]
    ep = {n: operator_shapes(m, Layout(tp=n, ep=n)).experts for n in (2, 4) if m.num_experts % n == 0}
    sliced = operator_shapes(m, Layout(tp=2)).experts
    assert ep[2].experts * ep[2].expert_bytes == pytest.approx(sliced.experts * sliced.expert_bytes)
    if 4 in ep:
        assert ep[4].experts * ep[4].expert_bytes == pytest.approx(ep[2].experts * ep[2].expert_bytes / 2)
    # Priced: a memory-bound decode of many sequences touches every expert; EP 4 reads half EP 2's.
    if 4 in ep:
        c2, c4 = priced(m, Layout(tp=2, ep=2)), priced(m, Layout(tp=4, ep=4))
        touched = [c.shapes.experts.experts * (1 - (1 - c.shapes.experts.top_k / c.shapes.experts.total) ** 4096)
                   * c.shapes.experts.expert_bytes for c in (c2, c4)]
        assert touched[1] == pytest.approx(touched[0] / 2)


def all_windowed(window: int):
    base = MODELS["qwen2.5-7b"]
    return base.model_copy(update={"name": "all-windowed", "layer_windows": (window,) * base.num_layers})


@settings(max_examples=30, deadline=None)
@given(window=st.sampled_from([64, 512, 4096]), seqs=st.integers(1, 64), past=st.integers(0, 50000),
       more=st.integers(1, 50000))
def test_a_windowed_models_decode_stops_growing_past_its_window(window, seqs, past, more):
    c = priced(all_windowed(window), Layout(tp=1))
    assert c.window == window
    at, beyond = decode(seqs, window + past, window), decode(seqs, window + past + more, window)
    assert c.step_time(beyond) == c.step_time(at)
    inside = decode(seqs, window // 2, window)
    assert c.step_time(inside) < c.step_time(at)
    # The fast-forward caps as step_time does, past the window: bit for bit.
    run = c.decode_run_times(at, 4)
    assert all(run[i] == c.step_time(decode(seqs, window + past + i, window)) for i in range(4))


@pytest.mark.parametrize("name,tp", [("qwen3-30b-a3b", 2), ("deepseek-v3", 8), ("llama-3-70b", 4)])
def test_one_stage_is_no_pipeline_and_a_round_adds_the_head_and_hops(name, tp):
    m = MODELS[name]
    one, plain = priced(m, Layout(tp=tp, pp=1)), priced(m, tp)
    two = priced(m, Layout(tp=tp, pp=2))
    for f in (decode(1, 500), decode(40, 2000), prefill(3000, 100, decodes=5, context=700)):
        assert one.step_time(f) == plain.step_time(f)
    if m.num_layers % 2 == 0:
        # One sequence: no micro-batching; two stages of half the layers each, the head
        # on the busiest stage (so priced twice), and one hop.
        f = decode(1, 900)
        ar, p = two.allreduce, two.params
        hop = p.allreduce_scale * (ar.latency_s + two.shapes.send_recv_bytes_per_token / ar.bandwidth)
        head = two._gemm(two.shapes.head.weight_bytes / (two.mem_bandwidth * p.mem_efficiency),
                         two.shapes.head.flops_per_token / (two.peak_flops * p.compute_efficiency), 1)
        assert two.step_time(f) == pytest.approx(plain.step_time(f) + head + hop, rel=1e-9)


def test_the_general_shapes_of_a_dense_model_agree_with_the_dense_ones():
    m = MODELS["llama-3-70b"]
    for tp in (1, 4, 8):
        dense, general = operator_shapes(m, tp), deployed_shapes(m, Layout(tp=tp))
        assert [g.weight_bytes for g in general.gemms] == pytest.approx([g.weight_bytes for g in dense.gemms])
        assert general.elementwise_bytes_per_token == pytest.approx(dense.elementwise_bytes_per_token)
        assert general.kv_bytes_per_token == pytest.approx(dense.kv_bytes_per_token)
        assert general.allreduces_per_layer == dense.allreduces_per_layer


LAYOUTS = [("qwen3-30b-a3b", Layout(tp=1)), ("qwen3-30b-a3b", Layout(tp=4, ep=4)),
           ("deepseek-v3", Layout(tp=8)), ("deepseek-v3", Layout(tp=8, ep=8, dp_attention=True)),
           ("gpt-oss-20b", Layout(tp=2)), ("gemma-3-12b", Layout(tp=2, pp=2)),
           ("mixtral-8x7b", Layout(tp=2, pp=4, ep=2)), ("llama-3-70b", Layout(tp=4, pp=2))]


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(LAYOUTS), seqs=st.integers(1, 200), chunk=st.integers(1, 8192),
       context=st.integers(0, 20000), more=st.integers(1, 5000))
def test_more_tokens_or_kv_never_cost_less(case, seqs, chunk, context, more):
    name, layout = case
    m = MODELS[name]
    c = priced(m, layout, HARDWARE["h200"])
    w = m.window
    assert c.step_time(decode(seqs, context + more, w)) >= c.step_time(decode(seqs, context, w))
    assert c.step_time(prefill(chunk + more, 0, w)) >= c.step_time(prefill(chunk, 0, w))
    f = decode(seqs, context, w)
    assert c.step_time(f._replace(decode_tokens=seqs + more)) >= c.step_time(f)


@settings(max_examples=30, deadline=None)
@given(case=st.sampled_from([c for c in LAYOUTS if not MODELS[c[0]].window]), seqs=st.integers(1, 200),
       context=st.integers(0, 20000), m=st.integers(1, 40))
def test_a_decode_run_is_its_steps_bit_for_bit(case, seqs, context, m):
    name, layout = case
    c = priced(MODELS[name], layout, HARDWARE["h200"])
    run = c.decode_run_times(decode(seqs, context), m)
    assert [float(t) for t in run] == [c.step_time(decode(seqs, context + i)) for i in range(m)]
    assert np.all(np.isfinite(run)) and not math.isnan(run.sum())


# -- the setup and the command line ---------------------------------------------------

def setup(model, hardware, **layout):
    return sim_setup(ExperimentConfig.model_validate(
        {"model": {"name": model}, "hardware": {"name": hardware, **layout}}))


@pytest.mark.parametrize("hardware,why", [
    ({"cost": "roofline"}, "asked for with cost = roofline"),
    ({"mem_efficiency": 0.7}, "mem_efficiency given, a roofline constant"),
    ({"step_overhead_s": 0.001, "allreduce_latency_s": 2e-5},
     "step_overhead_s, allreduce_latency_s given, roofline constants")])
def test_a_gpu_preset_priced_by_the_roofline_says_why(hardware, why):
    s = setup("llama-3-8b", "a100-80gb", **hardware)
    assert s.meta.cost_model == "roofline" and s.meta.roofline_because == why
    assert f"(the roofline: {why})" in " ".join(s.assumptions())


@pytest.mark.parametrize("model,hardware,layout,where", [
    ("qwen3-30b-a3b", "h100-sxm", {}, "shipped h100-sxm"),
    ("deepseek-v3", "h200", {"tensor_parallel": 8}, "shipped h100-sxm, scaled to h200"),
    ("deepseek-v3", "h200", {"tensor_parallel": 8, "expert_parallel": 8, "data_parallel_attention": True},
     "shipped h100-sxm, scaled to h200"),
    ("gemma-3-12b", "a100-80gb", {"tensor_parallel": 2, "pipeline_parallel": 2}, "shipped a100-80gb")])
def test_moe_mla_window_and_layouts_are_priced_by_the_gpu_profile(model, hardware, layout, where):
    s = setup(model, hardware, **layout)
    # the GPU form's kernels, as the served engine runs them (the default, experiments/setup/served.py)
    assert isinstance(s.cost, ServedGpuCost) and isinstance(s.cost.eager, GpuCostModel)
    assert s.meta.cost_model == "gpu profile"
    assert s.meta.gpu_profile == where and s.meta.roofline_because is None
    cfg = ExperimentConfig.model_validate({"model": {"name": model}, "hardware": {"name": hardware, **layout}})
    spec = MODELS[model]
    assert s.blocks == deployment_kv_blocks(spec, HARDWARE[hardware], cfg.hardware.layout(),
                                            cfg.scheduler.block_size, max_num_seqs=cfg.scheduler.max_num_seqs)
    lines = "\n".join(s.assumptions())
    assert "beyond a dense layer at TP" in lines
    for word, present in (("MoE:", spec.is_moe), ("MLA:", spec.is_mla), ("read at most", bool(spec.layer_windows)),
                          ("EP 8:", "expert_parallel" in layout), ("PP 2:", "pipeline_parallel" in layout)):
        assert (word in lines) == present, word
    rough = setup(model, hardware, cost="roofline", **layout)
    assert isinstance(rough.cost, DeploymentRoofline) and rough.meta.cost_model == "roofline"


@pytest.mark.parametrize("args,profile", [
    (["--model", "qwen3-30b-a3b", "--hardware", "h100-sxm"], "GPU profile shipped h100-sxm:"),
    (["--model", "deepseek-v3", "--hardware", "h200", "--tensor-parallel", "8"],
     "GPU profile shipped h100-sxm, scaled to h200")])
def test_simulate_prices_moe_models_by_the_gpu_profile(args, profile):
    code, out, err = cli(["simulate", *args, "--num-requests", "20", "--rate", "4", "--policy", "chunked"])
    assert code == 0, err
    text = out + err
    assert profile in text and "MoE:" in text and "roofline" not in text
