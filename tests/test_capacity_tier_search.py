"""`capacity deploy --kv-tier-options`: KV tiers on or off as a dimension of the search, the
winner's launch line with vLLM's offloading flags, and nothing of it without the option."""
from __future__ import annotations

import json
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.kv_tiers import TierConfig
from batchlab.experiments.capacity.launch import vllm_command
from batchlab.experiments.capacity.space import Deployment
from batchlab.experiments.capacity.tier_options import parse_tier_options, tier_config
from tests.helpers import cli, one_line_error, run_cli
from tests.test_capacity_launch import check_line

# Long multi-turn conversations on one L4 whose KV pool is cut to 1000 blocks (16,000 tokens):
# the histories outgrow the GPU, so KV binds (docs/results/2026-12-06-kv-tiers.md).
KV_BOUND = ["capacity", "deploy", "--workload", "multiturn", "--num-requests", "200", "--rate", "0.5",
            "--turns", "8", "--turn-gap", "30", "--system-prompt-len", "256", "--model", "qwen3-8b",
            "--hardware", "l4", "--cost", "roofline", "--router", "prefix_aware", "--num-kv-blocks", "1000",
            "--slo-ttft-ms", "1000", "--slo-tpot-ms", "200", "--tp-options", "1", "--dtype-options", "bf16",
            "--seats-options", "64", "--budget-options", "2048", "--max-replicas", "4", "--workers", "1"]


def test_the_option_parses_to_off_and_cpu_tiers():
    assert parse_tier_options(None) == [""]  # not given: the config's tier alone
    assert parse_tier_options("off, cpu:64,cpu:64.0") == ["off", "cpu:64"]
    assert tier_config("off", None) is None
    t = tier_config("cpu:32", tier_config("cpu:64", None).model_copy(update={"bandwidth_gbs": 50.0}))
    assert (t.kind, t.capacity_gib, t.bandwidth_gbs) == ("cpu", 32.0, 50.0)  # the config's other settings


@settings(max_examples=50, deadline=None)
@given(st.floats(min_value=1e-3, max_value=1e5, allow_nan=False))
def test_any_positive_size_round_trips(gib):
    (item,) = parse_tier_options(f"cpu:{gib!r}")
    assert tier_config(item, None).capacity_gib == float(item.split(":")[1])
    assert item == f"cpu:{gib:g}"


@pytest.mark.parametrize("value, word", [("cpu:0", "'cpu:0'"), ("cpu:-4", "'cpu:-4'"), ("cpu:lots", "'cpu:lots'"),
                                         ("disk:64", "'disk:64'"), ("gpu", "'gpu'"), ("cpu:nan", "'cpu:nan'"),
                                         (",", "expected a comma-separated list")])
def test_bad_values_are_one_line(value, word):
    code, _, err = cli(["capacity", "deploy", "--num-requests", "10", "--slo-tpot-ms", "50",
                        "--kv-tier-options", value])
    one_line_error(code, err, "--kv-tier-options", word)


def test_the_offload_size_is_the_tier_over_the_tp_ranks():
    dep = Deployment("llama-3-8b", "h100-sxm", 2, "bf16", 256, 2048, kv_tier="cpu:64")
    line = vllm_command(dep, 1)
    check_line(line)  # every flag one of vllm serve's, every value one it takes
    assert "--kv-offloading-backend native --kv-offloading-size 128" in line
    assert "offloading" not in vllm_command(dep._replace(kv_tier="off"), 1)
    assert "offloading" not in vllm_command(dep._replace(kv_tier=""), 1)


def test_where_kv_binds_the_search_picks_the_tier_and_launches_it(capsys, tmp_path):
    code, out, _ = run_cli([*KV_BOUND, "--kv-tier-options", "off,cpu:64", "--out", str(tmp_path)], capsys)
    assert code == 0
    winner = out.split("winner: ")[1].splitlines()
    assert winner[0].startswith("qwen3-8b TP1 l4 bf16 64 seats 2048 tokens KV cpu 64 GiB x 1: 1 GPU(s)")
    launch = winner[1].strip()
    assert "--kv-offloading-backend native --kv-offloading-size 64" in launch
    check_line(launch)
    without = next(x for x in winner if "without the KV tier" in x)
    assert "needs 2 replica(s)" in without and "p99 TTFT" in without  # what binds without it
    rows = (tmp_path / "options.csv").read_text()
    assert "kv_tier" in rows.splitlines()[0] and "cpu:64" in rows
    # the printed simulate command reruns the winner with its tier, and meets the SLO at 1 replica
    cmd = next(x for x in winner if "reproduce: " in x).split("reproduce: ")[1]
    assert "--kv-tier cpu --kv-tier-capacity 64" in cmd
    code, again, _ = run_cli([*shlex.split(cmd)[1:], "--format", "json"], capsys)
    assert code == 0 and json.loads(again)["chunked"]["p99_ttft_ms"] <= 1000


def test_without_the_option_nothing_of_tiers_is_printed_or_written(capsys, tmp_path):
    code, out, err = run_cli([*KV_BOUND, "--out", str(tmp_path)], capsys)
    assert code == 0
    assert "KV tier" not in out + err and "offloading" not in out and "--kv-tier" not in out
    assert "kv_tier" not in (tmp_path / "options.csv").read_text()
    assert "qwen3-8b TP1 l4 bf16 64 seats 2048 tokens x 2: 2 GPU(s)" in out  # KV binds: 2 L4s


def test_the_configured_tier_launches_with_its_offload_size():
    dep = Deployment("llama-3-8b", "h100-sxm", 2, "bf16", 256, 2048)  # kv_tier '': the config's
    line = vllm_command(dep, 1, TierConfig(kind="cpu", capacity_gib=32))
    check_line(line)
    assert "--kv-offloading-backend native --kv-offloading-size 64" in line
    assert "offloading" not in vllm_command(dep, 1, TierConfig(kind="disk", capacity_gib=32))  # no native flag
    assert "offloading" not in vllm_command(dep, 1, None)


def test_a_tier_in_the_config_reaches_the_winners_launch_line(capsys):
    # --kv-tier flags set [kv_tier] as a config's table does (a --config file would replace
    # capacity's embedded defaults that KV_BOUND relies on)
    code, out, _ = run_cli([*KV_BOUND, "--kv-tier", "cpu", "--kv-tier-capacity", "48",
                            "--kv-tier-preemption", "swap"], capsys)
    assert code == 0
    winner = out.split("winner: ")[1].splitlines()
    launch = winner[1].strip()
    assert "--kv-offloading-backend native --kv-offloading-size 48" in launch
    check_line(launch)
    # the reproduce command carries the tier, and its rerun meets the SLO at the winner's count
    cmd = next(x for x in winner if "reproduce: " in x).split("reproduce: ")[1]
    assert "--kv-tier cpu --kv-tier-capacity 48" in cmd and "--kv-tier-preemption swap" in cmd
    code, again, _ = run_cli([*shlex.split(cmd)[1:], "--format", "json"], capsys)
    rerun = json.loads(again)["chunked"]
    assert code == 0 and "kv_tier_bytes_out" in rerun and rerun["p99_ttft_ms"] <= 1000  # with its tier
