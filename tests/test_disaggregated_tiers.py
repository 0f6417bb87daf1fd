"""A KV tier below the replicas of both pools (sim/disaggregated with Pool.kv_tier): a
hand-off's KV comes over the link, never from the decode replica's tier (no tier bytes,
no hit, no second price), so where nothing is preempted or evicted a tier changes
nothing; under decode KV pressure the decode pool swaps to it; fast-forward stays exact;
and `simulate` takes [kv_tier] with [deployment]."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from batchlab.core.kv_tiers import TierConfig
from batchlab.sim.disaggregated import simulate_disaggregated
from tests.helpers import run_cli
from tests.test_disaggregated import KV_BYTES, deployment, same_run, workload

BIG = TierConfig(capacity_gib=64, preemption="swap", prefix=False)


def tiered(dep, tier: TierConfig = BIG):
    return replace(dep, prefill=replace(dep.prefill, kv_tier=tier, kv_bytes_per_token=KV_BYTES),
                   decode=replace(dep.decode, kv_tier=tier, kv_bytes_per_token=KV_BYTES))


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(0, 10_000))
def test_without_pressure_a_tier_changes_nothing(p, d, seed):
    dep = deployment(p, d, blocks=3000)
    w = workload(40, seed)
    plain, with_tier = simulate_disaggregated(w, dep), simulate_disaggregated(w, tiered(dep))
    a, b = plain.result, with_tier.result
    for c in a.requests:
        assert np.array_equal(a.requests[c], b.requests[c]), c
    assert np.array_equal(a.steps["duration_s"], b.steps["duration_s"])
    s = b.summary()
    assert s["kv_tier_bytes_in"] == s["kv_tier_bytes_out"] == s["kv_tier_swaps"] == 0
    assert (b.steps["tier_in_bytes"] == 0).all()


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["swap", "cheapest"]))
def test_the_decode_pool_swaps_under_pressure_and_fast_forward_stays_exact(seed, preemption):
    dep = tiered(deployment(1, 1, blocks=160, seats=16), BIG.model_copy(update={"preemption": preemption}))
    w = workload(40, seed, prompt=(200, 900), output=(50, 200))
    fast, stepped = simulate_disaggregated(w, dep), simulate_disaggregated(w, dep, fast_forward=False)
    same_run(fast, stepped)
    r = fast.result
    assert set(r.requests["status"]) == {"finished"}
    decode = r.steps["replica"] == 1
    # what a decode replica moves in is what its swaps moved out (hand-offs move nothing here)
    assert r.steps["tier_in_bytes"][decode].sum() == r.steps["tier_out_bytes"][decode].sum()
    if preemption == "swap" and r.summary()["preemptions"]:
        assert r.steps["tier_swaps"].sum() > 0 and r.steps["tier_recomputes"].sum() == 0


def test_simulate_takes_a_tier_with_the_pools(capsys, tmp_path):
    code, text, _ = run_cli(["simulate", "--prefill-replicas", "1", "--decode-replicas", "1", "--workload",
                             "multiturn", "--num-requests", "200", "--policy", "chunked", "--num-kv-blocks", "600",
                             "--kv-tier-capacity", "64", "--out", str(tmp_path)], capsys)
    assert code == 0 and "KV tier: cpu, 64 GiB per GPU" in text
    s = json.loads((tmp_path / "summary.json").read_text())["chunked"]
    assert s["kv_tier_prefix_hits"] > 0 and s["kv_transfers"] > 0  # prefixes from the tier, KV over the link
    assert "tier_in_bytes" in (tmp_path / "chunked" / "steps.csv").read_text().splitlines()[0]


@pytest.mark.parametrize("gib", ["0.0001"])
def test_a_tier_smaller_than_one_block_is_refused_with_the_pools(capsys, gib):
    code, _, err = run_cli(["simulate", "--prefill-replicas", "1", "--decode-replicas", "1", "--num-requests", "5",
                            "--kv-tier-capacity", gib], capsys)
    assert code == 2 and "kv_tier.capacity_gib = 0.0001 holds no KV block" in err


def test_each_pools_launch_line_carries_the_tier():
    from batchlab.experiments.capacity.pd_report import pool_commands
    from batchlab.experiments.capacity.pd_search import PDShape
    from tests.test_capacity_launch import check_line

    lines = pool_commands("llama-3-8b", "h100-sxm", "bf16", 64, 2048, PDShape(2, 1, 1, 2),
                          TierConfig(capacity_gib=32))
    prefill, decode = lines[0], lines[1]
    for line in (prefill, decode):
        check_line(line.split("  #")[0])
    assert "--kv-offloading-size 32 " in prefill and "--kv-offloading-size 64 " in decode  # GiB x TP
    assert "offloading" not in " ".join(pool_commands("llama-3-8b", "h100-sxm", "bf16", 64, 2048,
                                                      PDShape(2, 1, 1, 2)))
