"""GEMM rates by weight format (core/cost/served/formats.py): the format a model's GEMMs run
in, each format's rate moving only its own GEMMs, a rate at its prior pricing as before,
the fit freeing a rate only where some row runs its format, and routed experts at the
fused-MoE kernel's share of the bf16 rate."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.calibration.served_bench.fit import START, fit, predict, served_cost
from batchlab.core.cost.served.formats import MOE_COMPUTE_SHARE, RATES, WeightFormats, weight_formats
from batchlab.core.cost.served.model import experts_at_rate
from batchlab.core.cost.served.terms import SYMM_MEM_EFFICIENCY
from batchlab.core.features import StepFeatures
from batchlab.core.model.presets import lookup_model, with_dtypes
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.setup import sim_setup
from batchlab.experiments.setup.served import served_knobs
from batchlab.experiments.validation.served_benchmarks import Priced
from tests.helpers import cli
from tests.test_served_fit import recorded  # noqa: F401 (the fixture)

PREFILL = StepFeatures(1, 1, 2048, 0, 2048, 2048 * 2049 // 2)  # compute-bound: the GEMMs' FLOPs price it
DECODE = StepFeatures(4, 0, 0, 4, 4 * 600, 4 * 600)


def kernels(model: str, gpu: str, dtype: str | None = None, tp: int = 1) -> Priced:
    """The model's operator-fitted price on a GPU of tp, its formats as the setup reads them."""
    cfg = ExperimentConfig.model_validate({"model": {"name": model, **({"dtype": dtype} if dtype else {})},
                                           "hardware": {"name": gpu, "served_engine": "none",
                                                        "tensor_parallel": tp}})
    spec = lookup_model(model)
    formats = weight_formats(with_dtypes(spec, dtype, "bf16") if dtype else spec)
    return Priced(sim_setup(cfg).cost, 256, gpu, True, formats)


def test_each_model_reads_as_its_weight_formats():
    llama = lookup_model("llama-3.1-8b")
    assert weight_formats(llama) == WeightFormats("bf16", "bf16")
    assert weight_formats(with_dtypes(llama, "fp8", "bf16")) == WeightFormats("fp8_tensor", "fp8_tensor")
    deepseek = lookup_model("deepseek-v3")  # quant_method fp8, weight_block_size [128, 128]
    assert weight_formats(deepseek) == WeightFormats("fp8_block", "fp8_block")
    assert weight_formats(with_dtypes(deepseek, "bf16", "bf16")) == WeightFormats("bf16", "bf16")
    assert weight_formats(lookup_model("gpt-oss-120b")) == WeightFormats("bf16", "mxfp4")
    with pytest.raises(ValueError, match="weight format 'int4': expected one of bf16, fp8_tensor"):
        WeightFormats("int4")


@settings(max_examples=15, deadline=None)
@given(low=st.floats(0.3, 1.9), step=st.floats(0.05, 0.5))
def test_a_formats_rate_speeds_its_own_gemms_and_no_others(low, step):
    fp8, bf16 = kernels("llama-3.1-8b", "h200", "fp8"), kernels("llama-3.1-8b", "h200")
    slow = dataclasses.replace(START, fp8_tensor_gemm_rate=low)
    fast = dataclasses.replace(START, fp8_tensor_gemm_rate=min(2.0, low + step))
    # the same prefill, its GEMMs in fp8: no slower at the higher rate, strictly faster while not capped
    assert served_cost(fp8, fast).step_time(PREFILL) <= served_cost(fp8, slow).step_time(PREFILL)
    assert served_cost(fp8, dataclasses.replace(START, fp8_tensor_gemm_rate=0.3)).step_time(PREFILL) > \
        served_cost(fp8, START).step_time(PREFILL)
    # the bf16 model's price does not see it, nor the blockwise or mxfp4 rate
    for terms in (slow, fast, dataclasses.replace(START, fp8_block_gemm_rate=low, mxfp4_moe_rate=low)):
        assert served_cost(bf16, terms).step_time(PREFILL) == served_cost(bf16, START).step_time(PREFILL)


def test_the_mxfp4_rate_moves_the_experts_and_at_its_prior_prices_as_before():
    gpt = kernels("gpt-oss-120b", "h100-sxm")
    assert gpt.formats == WeightFormats("bf16", "mxfp4")
    as_bf16 = gpt._replace(formats=WeightFormats())
    for f in (PREFILL, DECODE):  # the prior (1: the bf16 rate, dequantised) is the price before formats
        assert served_cost(gpt, START).step_time(f) == served_cost(as_bf16, START).step_time(f)
    slow = dataclasses.replace(START, mxfp4_moe_rate=0.5)
    assert served_cost(gpt, slow).step_time(PREFILL) > 1.05 * served_cost(gpt, START).step_time(PREFILL)
    # the bf16 speed-up still moves the attention GEMMs with the experts held
    attn = dataclasses.replace(START, bf16_gemm_speedup=0.6, mxfp4_moe_rate=START.mxfp4_moe_rate * 1.1 / 0.6)
    assert served_cost(gpt, attn).step_time(PREFILL) != served_cost(gpt, START).step_time(PREFILL)


def test_the_fit_frees_a_rate_only_where_rows_run_its_format(recorded):  # noqa: F811
    _, recs, prices = recorded
    # every row's GEMMs in fp8 per-tensor (their format, not their base price, differs here):
    # bf16's speed-up is not told (held at the eager rate), the fp8 rate is
    marked = [p._replace(formats=WeightFormats("fp8_tensor", "fp8_tensor")) for p in prices]
    truth = dataclasses.replace(START, graph_fixed_share=1.0, symm_mem_efficiency=SYMM_MEM_EFFICIENCY.prior,
                                attention_speedup=1.6, bf16_gemm_speedup=1.0, fp8_tensor_gemm_rate=0.6)
    made = predict(recs, marked, truth)
    synthetic = [dataclasses.replace(r, row=dataclasses.replace(r.row, tpot_s=m.tpot_s)) for r, m in zip(recs, made)]
    f = fit(synthetic, marked)
    assert f.held == ["bf16_gemm_speedup", "fp8_block_gemm_rate", "mxfp4_moe_rate", "host_overlap", "graph_fixed_share",
                      "symm_mem_efficiency", "moe_compute_share"]
    assert f.terms.fp8_block_gemm_rate == RATES["fp8_block"].prior and f.terms.mxfp4_moe_rate == RATES["mxfp4"].prior
    assert f.terms.bf16_gemm_speedup == 1.0 and f.rms_log < 0.01
    plain = fit(synthetic, prices)  # the same rows as bf16: every other rate held at its prior
    assert plain.held == ["fp8_tensor_gemm_rate", "fp8_block_gemm_rate", "mxfp4_moe_rate", "host_overlap",
                          "graph_fixed_share", "symm_mem_efficiency", "moe_compute_share"]
    assert plain.terms.fp8_tensor_gemm_rate == RATES["fp8_tensor"].prior


def test_held_rates_are_knobs_over_their_priors_range_and_the_assumptions_name_them():
    knobs = {k.name: k for k in served_knobs("vllm")}
    block = knobs["served_fp8_block_gemm_rate"]
    assert (block.low, block.high) == (RATES["fp8_block"].low, RATES["fp8_block"].high)
    assert "held at its prior" in block.source
    code, text, err = cli(["simulate", "--model", "llama-3.1-8b", "--dtype", "fp8", "--hardware", "h200",
                           "--workload", "chat", "--num-requests", "8", "--rate", "4", "--seed", "1"])
    assert code == 0, err
    assert "fp8_tensor GEMMs at " in text and "x the datasheet fp8:bf16 ratio" in text
    code, text, err = cli(["simulate", "--model", "llama-3.1-8b", "--hardware", "h200",
                           "--workload", "chat", "--num-requests", "8", "--rate", "4", "--seed", "1"])
    assert code == 0, err
    assert "GEMMs at" not in text  # a bf16 model's line is as before formats


def _expert_flop_s(p: Priced, terms) -> float:
    """Seconds one routed token's FLOPs through one expert take as the served form prices them."""
    base = p.base
    e = experts_at_rate(base, terms, p.formats).experts
    return e.expert_flops_per_token / (base.peak_flops * terms.gemm_efficiency(base.params, p.formats.dense))


@settings(max_examples=10, deadline=None)
@given(share=st.floats(0.2, 1.0))
def test_routed_experts_compute_at_the_fused_moe_share_of_bf16_whatever_their_format(share):
    terms = dataclasses.replace(START, moe_compute_share=share, fp8_tensor_gemm_rate=1.7)
    bf16, fp8 = kernels("qwen3-30b-a3b", "h100-sxm"), kernels("qwen3-30b-a3b", "h100-sxm", "fp8")
    assert fp8.formats == WeightFormats("fp8_tensor", "fp8_tensor")
    flops = bf16.base.shapes.experts.expert_flops_per_token
    at_share = flops / (bf16.base.peak_flops_16 * bf16.base.params.compute_efficiency * START.bf16_gemm_speedup * share)
    # the experts' FLOPs at share x the bf16 dense rate: in bf16, and in fp8 despite the fp8 dense rate
    for p in (bf16, fp8):
        assert _expert_flop_s(p, terms) == pytest.approx(at_share, rel=1e-12)
    # a slower kernel prices a MoE prefill slower; a dense model's price does not see it
    slow = dataclasses.replace(terms, moe_compute_share=share / 2)
    assert served_cost(bf16, slow).step_time(PREFILL) > served_cost(bf16, terms).step_time(PREFILL)
    dense = kernels("qwen3-32b", "h100-sxm")
    assert served_cost(dense, slow).step_time(PREFILL) == served_cost(dense, terms).step_time(PREFILL)
    # blockwise fp8 experts run DeepGEMM's grouped GEMMs: at the fp8_block dense rate, not the share
    block = kernels("deepseek-v3", "h200", tp=8)
    assert block.formats == WeightFormats("fp8_block", "fp8_block")
    e = block.base.shapes.experts
    assert _expert_flop_s(block, terms) == pytest.approx(
        e.expert_flops_per_token / (block.base.peak_flops * terms.gemm_efficiency(block.base.params, "fp8_block")),
        rel=1e-12)
    assert served_cost(block, slow).step_time(PREFILL) == served_cost(block, terms).step_time(PREFILL)


def test_the_fused_moe_share_is_held_a_knob_over_its_range_and_named_for_moe_models_only():
    knobs = {k.name: k for k in served_knobs("vllm")}
    share = knobs["served_moe_compute_share"]
    assert (share.value, share.low, share.high) == (MOE_COMPUTE_SHARE.prior, MOE_COMPUTE_SHARE.low,
                                                    MOE_COMPUTE_SHARE.high)
    assert "held at its prior" in share.source
    run = ["--hardware", "h100-sxm", "--workload", "chat", "--num-requests", "8", "--rate", "4", "--seed", "1"]
    code, text, err = cli(["simulate", "--model", "qwen3-30b-a3b", *run])
    assert code == 0, err
    assert "routed experts in the fused-MoE kernel at 0.34 x the bf16 GEMMs' served rate (held at its prior" in text
    code, text, err = cli(["simulate", "--model", "qwen3-32b", *run])
    assert code == 0, err
    assert "fused-MoE" not in text
    code, text, err = cli(["simulate", "--model", "qwen3-30b-a3b", "--dtype", "fp8", *run])
    assert code == 0, err  # per-tensor fp8: the share; its dense GEMMs at their own rate
    assert "fp8_tensor GEMMs at " in text and "routed experts in the fused-MoE kernel at 0.34" in text
