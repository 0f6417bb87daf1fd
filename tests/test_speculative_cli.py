"""[speculative] and its flags as a user gives them: what simulate prints and records,
and bad input as one line naming the field."""
from __future__ import annotations

import json

import pytest

from tests.helpers import cli, one_line_error, run_cli

SMALL = ["--num-requests", "80", "--rate", "20", "--policy", "chunked"]


def test_speculation_shows_its_acceptance_and_records_its_settings(tmp_path, capsys):
    code, out, _ = run_cli(["simulate", *SMALL, "--speculative", "eagle", "--acceptance", "0.8",
                            "--out", str(tmp_path)], capsys)
    assert code == 0
    assert "acceptance length (mean)" in out and "speculative decoding: eagle, k=3" in out
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["speculative"]["method"] == "eagle" and config["speculative"]["acceptance"] == [0.8]
    meta = json.loads((tmp_path / "meta.json").read_text())["chunked"]
    assert meta["speculative"]["num_speculative_tokens"] == 3
    summary = json.loads((tmp_path / "summary.json").read_text())["chunked"]
    assert 2.0 < summary["mean_acceptance_length"] < 4.0  # mean of 1 + .8 + .64 + .512 = 2.95


def test_without_speculation_nothing_of_it_is_written(tmp_path, capsys):
    code, out, _ = run_cli(["simulate", *SMALL, "--out", str(tmp_path)], capsys)
    assert code == 0 and "acceptance" not in out
    assert "speculative" not in (tmp_path / "config.json").read_text()
    assert "speculative" not in (tmp_path / "meta.json").read_text()
    assert "acceptance" not in (tmp_path / "summary.json").read_text()


def test_speculation_pays_at_batch_one_on_a_memory_bound_gpu(capsys):
    base = ["simulate", "--num-requests", "20", "--rate", "0.5", "--policy", "chunked", "--format", "json"]
    _, plain, _ = run_cli(base, capsys)
    _, fast, _ = run_cli([*base, "--speculative", "eagle", "--acceptance", "0.8"], capsys)
    assert json.loads(fast)["chunked"]["median_tpot_ms"] < json.loads(plain)["chunked"]["median_tpot_ms"]


@pytest.mark.parametrize("args, words", [
    (["--speculative", "eagle", "--num-speculative-tokens", "0", "--acceptance", "0.5"],
     ["speculative.num_speculative_tokens (--num-speculative-tokens)"]),
    (["--speculative", "eagle", "--acceptance", "1.2"], ["speculative.acceptance", "from 0 to 1"]),
    (["--speculative", "eagle", "--acceptance", "-0.1"], ["speculative.acceptance", "from 0 to 1"]),
    (["--speculative", "eagle"], ["speculative.acceptance or speculative.acceptance_file"]),
    (["--speculative", "eagle", "--acceptance", "0.5,0.5"], ["acceptance: 2 rates", "num_speculative_tokens=3"]),
    (["--speculative", "draft_model", "--model", "qwen2.5-7b", "--draft-model", "qwen2.5-0.5b",
      "--acceptance", "0.5"], ["speculative.draft_model qwen2.5-0.5b", "vocabulary"]),
    (["--speculative", "draft_model", "--model", "llama-3-8b", "--draft-model", "llama-2-7b",
      "--acceptance", "0.5"], ["speculative.draft_model llama-2-7b", "vocabulary"]),
    (["--speculative", "draft_model", "--model", "llama-2-13b", "--draft-model", "llama-2-70b",
      "--hardware", "a100-40gb", "--tp", "2", "--acceptance", "0.5"], ["speculative.draft_model llama-2-70b", "does not fit beside llama-2-13b"]),
    (["--speculative", "draft_model", "--acceptance", "0.5"], ["needs draft_model", "draft_layers"]),
    (["--speculative", "eagle", "--acceptance-file", "/nonexistent.csv"],
     ["speculative.acceptance_file", "/nonexistent.csv"]),
])
def test_bad_speculative_input_is_one_line(args, words):
    code, _, err = cli(["simulate", *SMALL, *args])
    one_line_error(code, err, *words)


def test_a_draft_shorter_than_the_targets_context_is_refused(tmp_path):
    short = tmp_path / "short"
    short.mkdir()
    (short / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 512, "num_attention_heads": 8,
        "num_key_value_heads": 8, "intermediate_size": 1024, "vocab_size": 128256,
        "max_position_embeddings": 2048}))
    code, _, err = cli(["simulate", *SMALL, "--speculative", "draft_model", "--draft-model", str(short),
                        "--acceptance", "0.5"])
    one_line_error(code, err, "speculative.draft_model", "context of 2048", "shorter")


def test_a_sweep_searches_speculation_and_k(tmp_path):
    import csv

    grid = tmp_path / "grid.toml"
    grid.write_text('[workload]\nsource = "chat"\nnum_requests = 60\nrate = 4.0\n'
                    '[scheduler]\npolicy = "chunked"\n[speculative]\nacceptance = 0.7\n'
                    '[grid]\n"speculative.method" = ["off", "eagle"]\n'
                    '"speculative.num_speculative_tokens" = [1, 4]\n')
    code, _, err = cli(["sweep", "--config", str(grid), "--out", str(tmp_path / "out"), "--workers", "1"])
    assert code == 0, err
    rows = list(csv.DictReader(open(tmp_path / "out" / "results.csv")))
    on = {r["speculative.num_speculative_tokens"]: r for r in rows if r["speculative.method"] == "eagle"}
    off = [r for r in rows if r["speculative.method"] == "off"]
    assert len(on) == 2 and len(off) == 2 and all(not r["mean_acceptance_length"] for r in off)
    # per position 0.7: k=1 keeps 1.7 a verification, k=4 about 2.77
    assert 1.5 < float(on["1"]["mean_acceptance_length"]) < 1.9 < float(on["4"]["mean_acceptance_length"])
    assert off[0]["median_tpot_ms"] == off[1]["median_tpot_ms"]  # k means nothing without speculation


def test_capacity_speculation_finds_where_it_stops_paying(tmp_path, capsys):
    code, out, err = run_cli(["capacity", "speculation", "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
                              "--num-requests", "40", "--speculative", "eagle",
                              "--acceptance", "0.7", "--users", "1,256", "--k-options", "3",
                              # the kernels' price: the served engine's host time a sequence (35 us
                              # a step, amortised over a verified draft) moves the crossover past 256
                              "--served-engine", "none",
                              "--format", "json", "--out", str(tmp_path)], capsys)
    assert code == 0, err
    got = json.loads(out)
    tpot = {(r["users"], r["k"]): r["median_tpot_ms"] for r in got["levels"]}
    assert tpot[1, 3] < tpot[1, 0]  # one user: the weights read once for several tokens
    # 256 users on an H100: compute-bound steps, where verifying and drafting cost more than they keep
    assert tpot[256, 3] >= tpot[256, 0] and got["stops_paying_at_users"] == {"3": 256}
    assert (tmp_path / "speculation.png").stat().st_size > 0
    assert len((tmp_path / "speculation.csv").read_text().splitlines()) == 1 + 4


def test_capacity_speculation_needs_a_method():
    code, _, err = cli(["capacity", "speculation", "--num-requests", "10"])
    one_line_error(code, err, "--speculative METHOD")


def test_capacity_deploy_searches_speculation_and_names_it_in_the_launch_line(capsys):
    import shlex

    code, out, err = run_cli(["capacity", "deploy", "--model", "llama-3.1-8b", "--gpus", "h100-sxm",
                              "--tp-options", "1", "--dtype-options", "bf16", "--seats-options", "256",
                              "--budget-options", "2048", "--num-requests", "200", "--rate", "10",
                              "--slo-tpot-ms", "8", "--slo-ttft-ms", "2000", "--speculative", "eagle",
                              "--acceptance", "0.7", "--speculative-options", "off,3", "--workers", "1"], capsys)
    assert code == 0, err
    winner = next(line for line in out.splitlines() if line.startswith("winner:"))
    assert "spec eagle k=3" in winner  # the TPOT objective is met with fewer GPUs by drafting
    assert '--speculative-config \'{"method": "eagle", "num_speculative_tokens": 3' in out
    reproduce = next(line for line in out.splitlines() if "reproduce:" in line).split("reproduce: ")[1]
    assert "--speculative eagle --num-speculative-tokens 3" in reproduce and "--acceptance 0.7" in reproduce
    code, again, _ = run_cli([*shlex.split(reproduce)[1:], "--format", "json"], capsys)
    assert code == 0 and json.loads(again)["chunked"]["p99_tpot_ms"] <= 8


def test_bad_speculative_options_are_one_line():
    code, _, err = cli(["capacity", "deploy", "--num-requests", "10", "--slo-tpot-ms", "50",
                        "--speculative-options", "off,3"])
    one_line_error(code, err, "--speculative-options", "'3'", "--speculative METHOD")


def test_mtp_needs_a_model_that_ships_mtp_layers():
    code, _, err = cli(["simulate", *SMALL, "--speculative", "mtp", "--acceptance", "0.8"])
    one_line_error(code, err, "speculative.method mtp", "llama-3-8b declares no multi-token-prediction")
    code, _, err = cli(["simulate", *SMALL, "--model", "deepseek-v3", "--hardware", "h200", "--tp", "8",
                        "--speculative", "mtp", "--draft-layers", "2", "--acceptance", "0.8"])
    one_line_error(code, err, "speculative.draft_layers 2", "1 MTP layer")
