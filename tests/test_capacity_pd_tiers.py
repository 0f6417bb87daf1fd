"""`capacity deploy --pd-ratios --kv-tier-options`: each P:D line searched with and without
each KV tier; where KV binds the pools, the tier changes the disaggregated answer, and the
winner's per-pool launch lines carry vLLM's offloading flags with the tier sized by TP."""
from __future__ import annotations

import json

from batchlab.experiments.capacity.pd_report import pool_commands
from batchlab.experiments.capacity.pd_search import PDShape, lines
from batchlab.experiments.capacity.tier_options import tier_config
from tests.helpers import run_cli
from tests.test_capacity_launch import check_line
from tests.test_capacity_tier_search import KV_BOUND

# Aggregated replicas only at TP4 (4 L4s), so 1:2 pools of TP1 (3 GPUs) are searched below it.
PD = [*KV_BOUND, "--tp-options", "4", "--max-replicas", "8", "--pd-ratios", "1:2"]


def test_lines_cross_every_tier_option_with_the_same_pools():
    tiered = lines([(1, 2), (2, 1)], [(1, 2)], 4, ("off", "cpu:64"))
    assert [x.kv_tier for x in tiered] == ["off", "cpu:64", "off", "cpu:64"]
    assert tiered[0].candidates == tiered[1].candidates and tiered[1].name.endswith(" KV cpu 64 GiB")
    assert lines([(1, 2)], [(1, 2)], 4) == lines([(1, 2)], [(1, 2)], 4, ("",))
    assert [x.kv_tier for x in lines([(1, 2)], [(1, 1)], 4)] == [""]  # without the option: the config's


def test_where_kv_binds_the_tier_makes_disaggregation_win(capsys):
    code, out, _ = run_cli([*PD, "--kv-tier-options", "off,cpu:64", "--format", "json"], capsys)
    assert code == 0
    pd = json.loads(out)["disaggregated"]
    by_tier = {o["kv_tier"]: o for o in pd["options"]}
    assert by_tier["off"]["pools"] is None  # without the tier no 1:2 pools below 4 GPUs pass
    assert by_tier["cpu:64"]["pools"] == "1P x TP1 : 2D x TP1" and by_tier["cpu:64"]["passes"]
    assert pd["winner"] == "disaggregated"
    # the same search without --kv-tier-options: the config's (no) tier, and aggregated wins
    code, out, _ = run_cli([*PD, "--format", "json"], capsys)
    plain = json.loads(out)["disaggregated"]
    assert code == 0 and plain["winner"] == "aggregated" and "kv_tier" not in plain["options"][0]


def test_the_tiered_winner_launches_each_pool_with_offloading(capsys):
    code, out, _ = run_cli([*PD, "--kv-tier-options", "off,cpu:64"], capsys)
    assert code == 0
    launch = out[out.index("disaggregated winner's launch"):out.index("what binds each pool")].splitlines()
    serve = [x.strip() for x in launch if x.strip().startswith("vllm serve")]
    assert len(serve) == 2
    for line in serve:
        words = check_line(line)  # every flag one of vllm serve's
        tp = int(words[words.index("--tensor-parallel-size") + 1])
        assert words[words.index("--kv-offloading-size") + 1] == f"{64 * tp:g}"
        assert words[words.index("--kv-offloading-backend") + 1] == "native"
    without = next(x for x in launch if "without the KV tier" in x)
    assert "at 1P x TP1 : 2D x TP1 it fails: p99 TTFT" in without  # what the tier buys


def test_each_pool_offloads_the_per_gpu_tier_times_its_tp():
    out = pool_commands("llama-3-70b", "h100-sxm", "bf16", 256, 2048, PDShape(3, 2, 4, 2), tier_config("cpu:48", None))
    sizes = [check_line(x)[check_line(x).index("--kv-offloading-size") + 1] for x in out if x.startswith("vllm")]
    assert sizes == ["192", "96"]
    assert not any("offloading" in x for x in pool_commands("llama-3-70b", "h100-sxm", "bf16", 256, 2048,
                                                            PDShape(3, 2, 4, 2), tier_config("off", None)))


def test_without_the_tier_names_what_the_twin_needs_or_fails():
    from batchlab.experiments.capacity.pd_report import untiered
    from batchlab.experiments.capacity.pd_search import PDOption, best_pd

    off, cpu = lines([(1, 1)], [(1, 1)], 4, ("off", "cpu:64"))
    small, big = off.candidates[0], off.candidates[1]
    row = {"passes": True, "request_goodput": 1.0}
    tiered = PDOption(cpu, small, row, [{"deployment": small.label(), **row}])
    twin = PDOption(off, big, row, [{"deployment": small.label(), "passes": False, "failures": "p99 TTFT 9 ms > 1"},
                                    {"deployment": big.label(), **row}])
    assert best_pd([twin, tiered]) is tiered  # fewer GPUs first
    said = untiered(tiered, [twin, tiered])
    assert said == (f"without the KV tier: needs {big.label()} ({big.gpus} GPUs); "
                    f"at {small.label()} it fails: p99 TTFT 9 ms > 1")
    same = PDOption(off, small, row, [{"deployment": small.label(), **row}])
    assert best_pd([tiered, same]) is same  # equal GPUs: no tier (it costs host memory)
    assert untiered(same, [tiered, same]) == ""  # an untiered winner has no such line
