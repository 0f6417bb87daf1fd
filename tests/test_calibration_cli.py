"""`batchlab calibrate` and `batchlab simulate --profile` as a user runs them."""
from __future__ import annotations

import json

import pytest

from experiments.cli import main
from tests.test_calibration_profile import make_profile

SMALL = ["--num-requests", "30", "--rate", "5", "--policy", "continuous"]


def run_cli(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code, err, *words):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("batchlab: error:"), err
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_simulate_uses_the_profile_cost_model_and_kv_capacity(tmp_path, capsys):
    path = tmp_path / "p.json"
    make_profile().save(path)
    code, out, _ = run_cli(["simulate", *SMALL, "--profile", str(path), "--out", str(tmp_path / "o")], capsys)
    assert code == 0
    assert "batchlab-tiny" in out and "321 KV blocks of 16 tokens" in out
    meta = json.loads((tmp_path / "o" / "meta.json").read_text())["continuous"]
    assert meta["num_kv_blocks"] == 321 and meta["cost_model"].startswith("profile")
    assert meta["model"] == "batchlab-tiny"
    # another block size keeps the capacity in tokens; --num-kv-blocks overrides it
    code, out, _ = run_cli(["simulate", *SMALL, "--profile", str(path), "--block-size", "32"], capsys)
    assert code == 0 and "160 KV blocks of 32 tokens" in out
    code, out, _ = run_cli(["simulate", *SMALL, "--profile", str(path), "--num-kv-blocks", "50"], capsys)
    assert code == 0 and "50 KV blocks" in out


def test_profile_prices_steps_differently_from_the_roofline(tmp_path, capsys):
    path = tmp_path / "p.json"
    make_profile().save(path)
    _, out, _ = run_cli(["simulate", *SMALL, "--profile", str(path), "--format", "json"], capsys)
    _, out2, _ = run_cli(["simulate", *SMALL, "--model", "batchlab-tiny", "--hardware", "l4",
                          "--format", "json"], capsys)
    assert json.loads(out)["continuous"]["mean_tpot_ms"] != json.loads(out2)["continuous"]["mean_tpot_ms"]


def test_profile_from_a_config_file(tmp_path, capsys):
    path = tmp_path / "p.json"
    make_profile().save(path)
    cfg = tmp_path / "exp.toml"
    cfg.write_text(f'[workload]\nnum_requests = 20\nrate = 5.0\n[profile]\npath = "{path}"\n'
                   '[run]\npolicies = ["chunked"]\n')
    code, out, _ = run_cli(["simulate", "--config", str(cfg)], capsys)
    assert code == 0 and "321 KV blocks" in out


def test_shipped_default_profile_by_name(capsys):
    code, out, _ = run_cli(["simulate", *SMALL, "--profile", "default"], capsys)
    assert code == 0 and "batchlab-small" in out


@pytest.mark.parametrize("content,words", [
    ("{oops", ["not a JSON document"]),
    ('{"format": "batchlab-profile", "version": 0}', ["profile version 0"]),
    ('{"format": "batchlab-profile", "version": 1, "cost": 3}', ["bad profile field"]),
])
def test_simulate_bad_profile_is_one_line_exit_2(tmp_path, capsys, content, words):
    path = tmp_path / "bad.json"
    path.write_text(content)
    code, _, err = run_cli(["simulate", *SMALL, "--profile", str(path)], capsys)
    one_line_error(code, err, str(path), *words)


def test_simulate_missing_profile(tmp_path, capsys):
    code, _, err = run_cli(["simulate", *SMALL, "--profile", str(tmp_path / "none.json")], capsys)
    one_line_error(code, err, "profile not found")


def test_calibrate_unknown_model(tmp_path, capsys):
    pytest.importorskip("torch")
    code, _, err = run_cli(["calibrate", "--model", "batchlab-huge", "--out", str(tmp_path / "p.json")],
                           capsys)
    one_line_error(code, err, "batchlab-huge")


def test_calibrate_absent_device(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    code, _, err = run_cli(["calibrate", "--device", "cuda", "--out", str(tmp_path / "p.json")], capsys)
    one_line_error(code, err, "cuda", "no CUDA GPU")


def test_calibrate_bad_out_directory(tmp_path, capsys):
    code, _, err = run_cli(["calibrate", "--out", str(tmp_path / "no" / "p.json")], capsys)
    one_line_error(code, err, "does not exist")


def test_calibrate_then_simulate_end_to_end(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "tiny.json"
    code, text, _ = run_cli(["calibrate", "--model", "batchlab-tiny", "--grid", "quick",
                             "--kv-memory", "16MiB", "--out", str(out), "--no-progress"], capsys)
    assert code == 0
    assert "held-out, decode" in text and "matmul FLOP rate" in text and str(out) in text
    code, text, _ = run_cli(["simulate", *SMALL, "--profile", str(out)], capsys)
    assert code == 0 and "batchlab-tiny" in text
