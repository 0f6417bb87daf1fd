"""The attention terms of the GPU form (core/cost/gpu_form.py): prefill_self_pairs, a chunk's
pairs with itself, counted alike by the simulator and the real backend, estimated for step
tables written before it; the fit (calibration/operators) finds the constants that made
synthetic attention timings; the calibration's prices are the form's; a version-1 profile
reads as version 2 and prices as it did."""
from __future__ import annotations

import csv
import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.calibration.operators.fit import ATTN_PARAMS, AttentionArrays, attention_prices, fit_attention
from batchlab.calibration.operators.vidur import ATTENTION_COLUMNS, read_attention
from batchlab.core.batch import Batch, step_features
from batchlab.core.features import StepFeatures, self_pairs_estimate
from batchlab.core.cost.dispatch import gpu_cost, operator_shapes
from batchlab.core.cost.gpu_form import AllReduce, GpuCostParams
from batchlab.core.cost.gpu_profile import load_gpu_profile, parse_gpu_profile, shipped_gpu_dir
from batchlab.core.request import Request, Sequence
from batchlab.core.model.presets import lookup_hardware, MODELS
from batchlab.core.model.spec import ModelSpec

A100 = lookup_hardware("a100-80gb")
TRUE = {"attn_layer_s": 14e-6, "attn_seq_s": 0.4e-6, "attn_kv_efficiency": 0.8,
        "attn_pair_efficiency": 0.5, "attn_self_pair_cost": 2.5, "attn_prefill_token_s": 0.08e-6}
LAYER = GpuCostParams(mem_efficiency=0.85, compute_efficiency=0.7, ridge_k=1.5, gemm_fixed_s=6e-6,
                      layer_fixed_s=6e-6, elementwise_efficiency=0.6, elementwise_row_efficiency=0.006,
                      attn_layer_s=0, attn_seq_s=0, attn_kv_efficiency=1, attn_pair_efficiency=1,
                      step_s=1e-3, seq_s=10e-6)
NONE = AllReduce({}, 1e-5, 1e11)


def _chunk(prompt: int, cached: int) -> Sequence:
    s = Sequence(Request(0, 0.0, prompt, 5))
    s.num_computed = cached
    return s


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.integers(0, 500)), min_size=1, max_size=5))
def test_self_pairs_are_each_chunks_causal_pairs_with_itself(chunks):
    batch = Batch()
    for c, cached in chunks:
        batch.add(_chunk(cached + c + 10, cached), c)
    f = step_features(batch)
    assert f.prefill_self_pairs == sum(c * (c + 1) // 2 for c, _ in chunks)
    assert f.prefill_self_pairs <= f.prefill_attention_pairs <= f.attention_pairs
    # the estimate for tables without the column: equal chunks, exact for one a step
    est = self_pairs_estimate(f.prefill_tokens, f.num_prefill_seqs, f.prefill_attention_pairs)
    assert est <= f.prefill_attention_pairs
    if len(chunks) == 1:
        assert est == f.prefill_self_pairs


def test_decodes_add_no_self_pairs():
    batch = Batch()
    d = _chunk(20, 20)
    d.num_generated = 1
    d.num_computed = 20
    batch.add(d, 1)  # the decode of the token generated after a 20-token prompt
    f = step_features(batch)
    assert f.decode_tokens == 1 and f.prefill_self_pairs == 0 and f.attention_pairs == 21


def test_a_table_before_the_self_pairs_gets_the_equal_chunk_estimate(tmp_path):
    from tests.profiles import BASE, served_table
    from batchlab.core.run_folder import read_steps, write_table
    steps = served_table(BASE, seed=3, n=30)
    path = tmp_path / "steps.csv"
    write_table(path, {k: v for k, v in steps.items() if k != "prefill_self_pairs"})
    got = read_steps(path, "old")["prefill_self_pairs"]
    true = np.asarray(steps["prefill_self_pairs"], dtype=float)
    one = np.asarray(steps["num_prefill_seqs"]) <= 1
    assert (one & (true > 0)).any()  # chunks to estimate, not only decodes
    assert np.array_equal(got[one], true[one])
    assert (got <= np.asarray(steps["prefill_attention_pairs"])).all()


@pytest.mark.parametrize("policy,budget", [("continuous", None), ("chunked", 16)])
def test_the_real_driver_counts_the_same_pairs_as_the_simulator(runtime, policy, budget):
    """All requests arrive at once, so the batches cannot depend on how fast the machine
    steps (spaced arrivals once met a CI run whose steps took 20x their usual time:
    requests then shared batches they did not share in the simulator)."""
    from batchlab.backend.driver import run_workload
    from batchlab.core.config import SchedulerConfig
    from batchlab.core.cost.linear import LinearCostModel
    from batchlab.core.workload import Workload
    from batchlab.sim import simulate
    from tests.test_step_context import W
    w = Workload(np.zeros_like(W.arrival), W.prompt_len, W.output_len)
    cfg = SchedulerConfig(policy=policy, max_num_batched_tokens=budget)
    real = run_workload(runtime, w, cfg, progress=False).steps
    sim = simulate(w, cfg, LinearCostModel(0.003, {"prefill_tokens": 2e-5}),
                   int(runtime.kv_blocks(cfg.block_size))).steps
    assert real["prefill_self_pairs"].sum() > 0
    for c in ("prefill_self_pairs", "prefill_attention_pairs", "attention_pairs", "prefill_tokens"):
        np.testing.assert_array_equal(real[c], sim[c], err_msg=c)


# -- the fit on synthetic timings --------------------------------------------------------

SHAPE = operator_shapes(ModelSpec(name="attention", num_layers=1, hidden_size=8192, num_heads=64,
                                    num_kv_heads=8, head_dim=128, intermediate_size=1, vocab_size=1), 2)


def _true_time(prefill: bool, n: int, chunk: int, cached: int) -> float:
    """One layer's attention at TRUE, written out apart from the code under test."""
    kv_bytes, flops = SHAPE.kv_bytes_per_token, SHAPE.attn_flops_per_pair
    bw, peak = A100.mem_bandwidth * TRUE["attn_kv_efficiency"], A100.flops_for("bf16") * TRUE["attn_pair_efficiency"]
    t = TRUE["attn_layer_s"] + TRUE["attn_seq_s"] * n
    if not prefill:
        return t + n * (cached + 1) * (kv_bytes / bw + flops / peak)
    own = chunk * (chunk + 1) / 2
    return (t + n * (cached + chunk) * kv_bytes / bw + n * (chunk * cached + TRUE["attn_self_pair_cost"] * own)
            * flops / peak + TRUE["attn_prefill_token_s"] * n * chunk)


def write_attention(path):
    rows = [(False, n, 0, s) for n in (1, 2, 8, 32, 128) for s in (32, 256, 1024, 4000)]
    rows += [(True, 1, c, s) for c in (64, 256, 1024, 4096) for s in (0, 128, 1024, 3000)]
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(ATTENTION_COLUMNS))
        w.writeheader()
        for prefill, n, c, s in rows:
            ms = f"{_true_time(prefill, n, c, s) * 1e3!r}"
            w.writerow({"n_embd": 8192, "n_q_head": 64, "n_kv_head": 8, "num_tensor_parallel_workers": 2,
                        "batch_size": n, "prefill_chunk_size": c, "kv_cache_size": s,
                        "is_prefill": str(prefill), "time_stats.attn_decode.median": "" if prefill else ms,
                        "time_stats.attn_prefill.median": ms if prefill else ""})
    return path


def test_the_fit_finds_the_attention_constants_that_made_the_timings(tmp_path):
    rows = read_attention(write_attention(tmp_path / "attention.csv"))
    got = fit_attention(rows, A100.mem_bandwidth, A100.flops_for("bf16"))
    assert set(got.values) == set(ATTN_PARAMS) == set(TRUE)
    for name, v in TRUE.items():
        assert got.values[name] == pytest.approx(v, rel=1e-4), name
    assert got.rms_log < 1e-6


def test_the_calibrations_attention_prices_are_the_forms(tmp_path):
    rows = read_attention(write_attention(tmp_path / "attention.csv"))
    x = [TRUE[n] for n in ATTN_PARAMS]
    priced = attention_prices(x, AttentionArrays.of(rows), A100.mem_bandwidth, A100.flops_for("bf16"))
    form = gpu_cost(SHAPE, replace(LAYER, **TRUE), A100.mem_bandwidth, A100.flops_for("bf16"),
                    A100.flops_for("bf16"), NONE)
    for r, p in zip(rows, priced):
        tokens = r.prefill_tokens if r.prefill else r.num_seqs
        f = StepFeatures(r.num_seqs, r.num_seqs if r.prefill else 0, r.prefill_tokens,
                         0 if r.prefill else r.num_seqs, r.kv_tokens_read, r.attention_pairs,
                         prefill_attention_pairs=r.attention_pairs if r.prefill else 0,
                         prefill_self_pairs=r.self_pairs)
        # the step less everything but attention: the layer's attention terms
        attention = (form.step_time(f) - form._base(r.num_seqs, tokens)
                     + TRUE["attn_layer_s"] + TRUE["attn_seq_s"] * r.num_seqs)
        assert p == pytest.approx(attention, rel=1e-9)
        assert p == pytest.approx(r.time_s, rel=1e-9)


# -- profiles before the terms ------------------------------------------------------------

def test_a_version_1_profile_reads_and_prices_as_it_did():
    d = json.loads((shipped_gpu_dir() / "a100-80gb.json").read_text())
    for n in ("attn_self_pair_cost", "attn_prefill_token_s"):
        d["params"].pop(n, None)
    d["version"] = 1
    old = parse_gpu_profile(json.dumps(d), "old.json")
    assert old.version == 2
    assert old.params["attn_self_pair_cost"].value == 1.0 and old.params["attn_prefill_token_s"].value == 0.0
    p = old.cost_params()
    cost = old.cost(MODELS["llama-3-8b"], 1, A100)
    f = StepFeatures(3, 1, 500, 2, 900, 500 * 501 // 2 + 400, prefill_attention_pairs=500 * 501 // 2,
                     prefill_self_pairs=500 * 501 // 2)
    # without the terms: all pairs at one rate, no per-token cost, bit for bit
    assert cost.step_time(f) == cost.step_time(f._replace(prefill_self_pairs=0))
    assert old.with_values({"attn_self_pair_cost": 2.0}).cost(MODELS["llama-3-8b"], 1, A100).step_time(f) > \
        cost.step_time(f)
    assert p.attn_self_pair_cost == 1.0
    assert all(k.low <= k.value <= k.high for k in old.knobs())


def test_the_shipped_profiles_price_a_chunks_own_pairs_above_cached_ones():
    for gpu in ("a100-80gb", "h100-sxm", "a40"):
        p = load_gpu_profile(gpu)
        assert p.version == 2 and p.params["attn_self_pair_cost"].value > 1, gpu
