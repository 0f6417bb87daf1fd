"""Policies with parameters, admission orders compared side by side, per-class results
and per-request latency columns, as a user meets them on the command line."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from tests.helpers import run_cli

SMALL = ["--num-requests", "120", "--rate", "20"]


def test_list_policies_shows_parameters_orders_and_modes(capsys):
    code, out, _ = run_cli(["simulate", "--list-policies"], capsys)
    assert code == 0
    for text in ("memory_aware", "long_prompt = 512 (int; >= 1", "kv_threshold = 0.8",
                 "shortest_output", "priority_aging", "victim orders", "recent", "reserved"):
        assert text in out
    code, out, _ = run_cli(["simulate", "--list-policies", "--format", "json"], capsys)
    listing = json.loads(out)
    params = {p["name"]: p for p in listing["policies"]["memory_aware"]["params"]}
    assert params["long_prompt"]["default"] == 512 and params["long_prompt"]["description"]
    assert listing["policies"]["continuous"]["params"] == []


def test_a_parameter_changes_decisions_and_is_recorded(tmp_path, capsys):
    # A small pool: the default preempts; with long_prompt=1, kv_threshold=0.3 every
    # prompt waits while 30% of it is in use, and nothing is preempted.
    base = ["simulate", *SMALL, "--rate", "inf", "--num-kv-blocks", "600",
            "--policy", "memory_aware", "--format", "json"]
    _, out, _ = run_cli(base, capsys)
    default = json.loads(out)["memory_aware"]
    code, out, _ = run_cli([*base, "--policy-param", "long_prompt=1", "--policy-param",
                            "kv_threshold=0.3", "--out", str(tmp_path)], capsys)
    assert code == 0
    strict = json.loads(out)["memory_aware"]
    assert default["preemptions"] > 0 and strict["preemptions"] == 0
    assert strict["median_queueing_delay_ms"] != default["median_queueing_delay_ms"]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["scheduler"]["params"] == {"long_prompt": 1, "kv_threshold": 0.3}
    assert config["policy_params"] == {"memory_aware": {"long_prompt": 1, "kv_threshold": 0.3}}


def test_parameters_from_toml_and_defaults_in_config_json(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[workload]\nsource = "chat"\nnum_requests = 50\n[scheduler]\npolicy = "memory_aware"\n'
                   '[scheduler.params]\nlong_prompt = 64\n[run]\npolicies = ["memory_aware", "continuous"]\n')
    code, _, _ = run_cli(["simulate", "--config", str(cfg), "--out", str(tmp_path / "o")], capsys)
    assert code == 0
    config = json.loads((tmp_path / "o" / "config.json").read_text())
    assert config["policy_params"] == {"memory_aware": {"long_prompt": 64, "kv_threshold": 0.8},
                                       "continuous": {}}


@pytest.mark.parametrize("args, message", [
    (["--policy", "continuous", "--policy-param", "long_prompt=10"],
     "scheduler.params.long_prompt (--policy-param): no policy of this run declares it"),
    (["--policy", "memory_aware", "--policy-param", "long_prompt=0"],
     "scheduler.params.long_prompt: Input should be greater than or equal to 1 for policy memory_aware"),
    (["--policy", "memory_aware", "--policy-param", "kv_threshold=high"],
     "scheduler.params.kv_threshold: Input should be a valid number"),
    (["--policy", "memory_aware", "--policy-param", "long_prompt"], "expected NAME=VALUE"),
    (["--admission", "fcfs,bogus"], "--admission bogus: no such admission order"),
])
def test_bad_parameters_and_orders_are_one_line_errors(args, message, capsys):
    code, _, err = run_cli(["simulate", *SMALL, *args], capsys)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_admission_orders_get_a_column_each(tmp_path, capsys):
    code, out, _ = run_cli(["simulate", *SMALL, "--rate", "inf", "--policy", "continuous,chunked",
                            "--admission", "fcfs", "--admission", "shortest_output", "--format", "json",
                            "--out", str(tmp_path)], capsys)
    assert code == 0
    s = json.loads(out)
    assert list(s) == ["continuous+fcfs", "continuous+shortest_output", "chunked+fcfs",
                       "chunked+shortest_output"]
    # Shortest job first: a lower mean latency when everybody arrives at once.
    assert s["continuous+shortest_output"]["mean_e2el_ms"] < s["continuous+fcfs"]["mean_e2el_ms"]
    assert (tmp_path / "chunked+shortest_output" / "requests.csv").exists()
    code, out, _ = run_cli(["simulate", *SMALL, "--admission", "fcfs,priority"], capsys)
    header = next(line for line in out.splitlines() if "static+fcfs" in line)  # the table's
    assert header.split() == [f"{p}+{a}" for p in ("static", "continuous", "chunked")
                              for a in ("fcfs", "priority")]


def test_results_by_priority_class_and_replica(tmp_path, capsys):
    code, out, _ = run_cli(["simulate", "--workload", "tests/data/batchlab_example.csv", "--replicas", "2",
                            "--policy", "continuous", "--slo-ttft-ms", "500", "--out", str(tmp_path)], capsys)
    assert code == 0
    assert "replica 0:" in out and "replica 1:" in out
    s = json.loads((tmp_path / "summary.json").read_text())["continuous"]
    reps = s["by_replica"]
    assert set(reps) == {"0", "1"}
    assert sum(r["completed"] for r in reps.values()) == s["completed"]
    assert sum(r["request_goodput"] for r in reps.values()) == pytest.approx(s["request_goodput"])
    rows = list(csv.DictReader(open(tmp_path / "continuous" / "requests.csv")))
    r0 = [r for r in rows if r["replica"] == "0"]
    ttft = sorted(float(r["ttft_ms"]) for r in r0)
    assert reps["0"]["median_ttft_ms"] == pytest.approx(float(np.median(ttft)))


def test_priority_classes_are_broken_down(capsys):
    code, out, _ = run_cli(["simulate", "--workload", "tests/data/batchlab_example.jsonl",
                            "--policy", "continuous", "--format", "json"], capsys)
    s = json.loads(out)["continuous"]
    if "by_priority" not in s:
        pytest.fail("the example trace has several priorities: expected a by_priority breakdown")
    assert sum(c["requests"] for c in s["by_priority"].values()) == s["completed"] + s["rejected"]


def test_request_table_has_vllm_latency_columns(tmp_path, capsys):
    code, _, _ = run_cli(["simulate", *SMALL, "--policy", "chunked", "--out", str(tmp_path)], capsys)
    assert code == 0
    rows = list(csv.DictReader(open(tmp_path / "chunked" / "requests.csv")))
    for r in rows:
        a, first, fin = float(r["arrival_s"]), float(r["first_token_s"]), float(r["finish_s"])
        n = int(r["output_len"])
        assert float(r["ttft_ms"]) == pytest.approx((first - a) * 1000)
        assert float(r["e2el_ms"]) == pytest.approx((fin - a) * 1000)
        assert float(r["queueing_delay_ms"]) == pytest.approx((float(r["first_scheduled_s"]) - a) * 1000)
        if n > 1:
            assert float(r["tpot_ms"]) == pytest.approx((fin - first) * 1000 / (n - 1))
        else:
            assert r["tpot_ms"] == "nan"
