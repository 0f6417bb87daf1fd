"""The roofline's dtypes (bytes and the dtype's FLOP/s), TP all-reduce costs, and the
vLLM-matching scheduler defaults, as simulate applies and prints them."""
from __future__ import annotations

import json

import pytest

from batchlab.core.batch import StepFeatures
from batchlab.core.cost.dispatch import kv_capacity_blocks, roofline
from batchlab.core.model.presets import lookup_hardware, lookup_model, with_dtypes
from batchlab.experiments.cli import main

SMALL = ["--workload", "chat", "--num-requests", "120", "--rate", "20", "--policy", "chunked"]


def decode(n: int, ctx: int) -> StepFeatures:
    return StepFeatures(num_seqs=n, decode_tokens=n, kv_tokens_read=n * ctx, attention_pairs=n * ctx)


def prefill(tokens: int) -> StepFeatures:
    return StepFeatures(num_seqs=1, num_prefill_seqs=1, prefill_tokens=tokens,
                        kv_tokens_read=tokens, attention_pairs=tokens * (tokens + 1) // 2)


def test_fp8_weights_halve_the_bytes_and_double_the_flops():
    m, hw = lookup_model("llama-3-8b"), lookup_hardware("h100-sxm")
    bf16, fp8 = roofline(m, hw), roofline(with_dtypes(m, "fp8", "bf16"), hw)
    assert fp8.weight_bytes == bf16.weight_bytes / 2
    assert fp8.kv_bytes_per_token == bf16.kv_bytes_per_token  # the KV cache stays bf16
    assert (bf16.peak_flops, fp8.peak_flops) == (989e12, 1979e12)  # the datasheet figures
    # Attention still runs at 16 bits: its FLOPs cost the same time.
    assert fp8.attention_flops_per_pair / fp8.peak_flops == pytest.approx(
        bf16.attention_flops_per_pair / bf16.peak_flops)
    assert roofline(with_dtypes(m, "fp8", "fp8"), hw).kv_bytes_per_token == m.kv_bytes_per_token / 2
    # A memory-bound decode step: nearly twice as fast with fp8 weights.
    assert 1.8 < bf16.step_time(decode(8, 512)) / fp8.step_time(decode(8, 512)) < 2.0


def test_fp8_kv_cache_doubles_the_kv_blocks():
    m, hw = lookup_model("llama-3-70b"), lookup_hardware("h200")
    bf16 = kv_capacity_blocks(m, hw, 4, 16)
    assert kv_capacity_blocks(with_dtypes(m, "bf16", "fp8"), hw, 4, 16) in (2 * bf16, 2 * bf16 + 1)


def test_fp8_on_an_a100_is_an_error():
    with pytest.raises(ValueError, match="no fp8 tensor cores"):
        roofline(with_dtypes(lookup_model("llama-3-8b"), "fp8", "bf16"), lookup_hardware("a100-80gb"))


def test_tp_all_reduces_cost_a_latency_each_plus_bytes_over_the_link():
    m, hw = lookup_model("llama-2-70b"), lookup_hardware("a100-80gb")
    f = decode(32, 1024)
    with_lat = roofline(m, hw, 2).step_time(f)
    no_lat = roofline(m, hw, 2, allreduce_latency_s=0.0).step_time(f)
    assert with_lat - no_lat == pytest.approx(160 * 45e-6)  # 2 per layer, 80 layers
    ring_bytes = 160 * 8192 * 2 * 32 * 2 * (2 - 1) / 2
    cost = roofline(m, hw, 2)
    assert cost.comm_bytes_per_token * 32 == pytest.approx(ring_bytes)
    assert cost.comm_latency_s == pytest.approx(160 * 45e-6)


def run_json(args, capsys):
    code = main(["simulate", *args, "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_dtype_in_the_config_is_honoured(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[workload]\nsource = "chat"\nnum_requests = 120\nrate = 20.0\n'
                   '[model]\nname = "llama-3-8b"\ndtype = "fp8"\n[hardware]\nname = "h100-sxm"\n'
                   '[run]\npolicies = ["chunked"]\n')
    fp8 = run_json(["--config", str(cfg)], capsys)["chunked"]
    bf16 = run_json(["--config", str(cfg), "--dtype", "bf16"], capsys)["chunked"]
    assert fp8["median_tpot_ms"] < 0.8 * bf16["median_tpot_ms"]


def test_efficiency_flags_move_the_answer(capsys):
    # Both by the roofline: the flags are its constants (given, they price by it).
    base = run_json([*SMALL, "--cost", "roofline"], capsys)["chunked"]
    slow = run_json([*SMALL, "--mem-efficiency", "0.4", "--step-overhead", "0.004"], capsys)["chunked"]
    assert slow["median_tpot_ms"] > 1.5 * base["median_tpot_ms"]


def test_assumptions_and_engine_defaults_are_printed(capsys):
    assert main(["simulate", *SMALL, "--hardware", "h200", "--tp", "2",
                 "--kv-cache-dtype", "fp8", "--cost", "roofline"]) == 0
    out = capsys.readouterr().out
    assert "80% of datasheet memory bandwidth, 60% of bf16 FLOP/s, step overhead 2.00 ms" in out
    assert "weights bf16, KV cache fp8" in out
    assert "64 all-reduces a step, 45 us each plus bytes over NVLink 4 at 450 GB/s" in out
    assert "vLLM >= 0.9 API server's rule for h200" in out and "max_num_seqs=1024" in out
    assert "max_num_batched_tokens=8192 (chunked)" in out and "1024 seats" in out
    assert "queue (stability)" in out


def test_engine_defaults_follow_the_hardware_unless_given(capsys):
    def seats(*extra):
        assert main(["simulate", *SMALL, *extra]) == 0
        return capsys.readouterr().out
    assert "256 seats" in seats("--hardware", "a100-80gb")
    assert "max_num_batched_tokens=2048 (chunked)" in seats("--hardware", "l4")
    given = seats("--hardware", "h100-sxm", "--max-num-seqs", "64", "--max-num-batched-tokens", "4096")
    assert "64 seats" in given and "scheduler defaults: as given" in given


def test_seeds_report_a_mean_with_an_interval_and_a_paired_difference(capsys):
    r = run_json(["--num-requests", "150", "--rate", "20", "--policy", "continuous,chunked",
                  "--seeds", "3"], capsys)
    one = {s: run_json(["--num-requests", "150", "--rate", "20", "--policy", "continuous",
                        "--seed", str(s)], capsys)["continuous"]["p99_ttft_ms"] for s in (0, 1, 2)}
    m = r["continuous"]["metrics"]["p99_ttft_ms"]
    assert m["mean"] == pytest.approx(sum(one.values()) / 3)
    assert m["ci95_low"] < m["mean"] < m["ci95_high"]
    d = r["chunked"]["paired_difference_vs_continuous"]["median_tpot_ms"]
    assert d["ci95_high"] < 0 and d["decided"]  # chunked decodes faster, on every seed
    assert r["continuous"]["seeds"] == [0, 1, 2]


def test_bad_dtypes_are_one_line_errors(capsys):
    assert main(["simulate", *SMALL, "--dtype", "int3"]) == 2
    assert "unknown dtype 'int3'" in capsys.readouterr().err
    assert main(["simulate", *SMALL, "--dtype", "fp8"]) == 2  # the default hardware is an A100
    assert "no fp8 tensor cores" in capsys.readouterr().err
    assert main(["simulate", *SMALL, "--seeds", "0"]) == 2


def test_t_quantiles_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    from batchlab.experiments.repeats import t975
    for df in range(1, 200):
        assert t975(df) == pytest.approx(stats.t.ppf(0.975, df), abs=2e-3)


def test_the_demos_seats_are_said_to_be_the_demos(capsys):
    # The embedded demo sets 32 seats: neither the user's choice nor vLLM's rule, and the
    # output says whose they are; given on the command line, they are the user's.
    assert main(["simulate", "--num-requests", "60"]) == 0
    out = capsys.readouterr().out
    assert "32 seats" in out
    assert "max_num_seqs=32: the built-in demo's" in out and "vLLM's rule gives 256" in out
    assert main(["simulate", "--num-requests", "60", "--max-num-seqs", "32"]) == 0
    assert "the built-in demo's" not in capsys.readouterr().out
