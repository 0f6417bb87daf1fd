"""A KV tier beside the other serving features: a speculative draft's own KV is swapped
with the target's (the tier's bytes per token count it), speculation and a tier run
together, prefill/decode pools size it by each pool's TP and refuse speculation."""
from __future__ import annotations

import json

import pytest

from batchlab.core.model.presets import lookup_model
from batchlab.experiments.config import build_config
from batchlab.experiments.setup.simulation import sim_setup
from tests.helpers import one_line_error, run_cli

MODEL = {"name": "llama-3.1-8b"}
HARDWARE = {"name": "h100-sxm"}
TIER = {"capacity_gib": 16}


def _tier_bytes(speculative: dict | None) -> float:
    data = {"model": MODEL, "hardware": HARDWARE, "kv_tier": TIER}
    if speculative:
        data["speculative"] = speculative
    return sim_setup(build_config(data)).kv_bytes_per_token


def test_an_eagle_heads_kv_moves_with_the_targets():
    plain = _tier_bytes(None)
    eagle = _tier_bytes({"method": "eagle", "acceptance": [0.7]})
    layers = lookup_model(MODEL["name"]).num_layers  # the head: one layer at the target's widths
    assert plain > 0 and eagle == pytest.approx(plain * (1 + 1 / layers), rel=1e-12)


def test_a_draft_of_the_targets_own_layers_shares_its_kv():
    shared = _tier_bytes({"method": "draft_model", "draft_layers": 4, "acceptance": [0.7]})
    assert shared == _tier_bytes(None)


def test_speculation_and_a_tier_run_together(capsys):
    code, out, err = run_cli(["simulate", "--workload", "multiturn", "--num-requests", "200", "--policy",
                              "chunked", "--num-kv-blocks", "300", "--kv-tier-capacity", "16",
                              "--speculative", "eagle", "--acceptance", "0.7", "--format", "json"], capsys)
    assert code == 0, err
    s = json.loads(out)["chunked"]
    assert s["completed"] == 200 and s["mean_acceptance_length"] > 1 and s["kv_tier_bytes_out"] > 0


def test_pools_size_the_tier_by_each_pools_tp():
    from batchlab.experiments.disaggregation.setup import pd_setup
    cfg = build_config({"model": {"name": "llama-3-8b"}, "hardware": HARDWARE, "kv_tier": TIER,
                        "scheduler": {"policy": "chunked"},
                        "deployment": {"prefill_tp": 1, "decode_tp": 2}})
    dep = pd_setup(cfg).deployment("chunked")
    assert dep.prefill.kv_tier == dep.decode.kv_tier == cfg.kv_tier
    # each GPU holds its KV heads' share: half a token's bytes at TP2
    assert dep.prefill.kv_bytes_per_token == 2 * dep.decode.kv_bytes_per_token == lookup_model(
        "llama-3-8b").kv_bytes_per_token


def test_pools_refuse_speculation(capsys):
    # the pools emit one token a step: a draft priced without its extra tokens would be wrong
    code, _, err = run_cli(["simulate", "--num-requests", "20", "--policy", "chunked", "--model", "llama-3-8b",
                            "--hardware", "h100-sxm", "--prefill-replicas", "1", "--decode-replicas", "1",
                            "--speculative", "eagle", "--acceptance", "0.7"], capsys)
    one_line_error(code, err, "[speculative]", "[deployment]")
