"""`batchlab calibrate` and `batchlab simulate --profile` as a user runs them."""
from __future__ import annotations

import json

import pytest

from tests.helpers import one_line_error, run_cli
from tests.profiles import make_profile

SMALL = ["--num-requests", "30", "--rate", "5", "--policy", "continuous"]


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


@pytest.mark.backend
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
    assert json.loads(out.read_text())["grid"]["name"] == "quick"
    code, text, err = run_cli(["simulate", *SMALL, "--profile", str(out)], capsys)
    assert code == 0 and "batchlab-tiny" in text
    assert f"batchlab: warning: {out}: profile measured on the quick grid" in err  # not for use


def test_simulate_warns_only_for_a_quick_grid_profile(tmp_path, capsys):
    from batchlab.core.cost.profile import GridInfo
    path = tmp_path / "p.json"
    make_profile(grid=GridInfo(name="quick", points=18, rounds=3, target_s=0)).save(path)
    code, _, err = run_cli(["simulate", *SMALL, "--profile", str(path)], capsys)
    assert code == 0 and err.count("batchlab: warning:") == 1 and "quick grid" in err
    code, _, err = run_cli(["simulate", *SMALL, "--profile", "default"], capsys)
    assert code == 0 and "warning" not in err


@pytest.mark.parametrize("args, words", [
    (["--model", "llama-3-70b"], ["'llama-3-70b'", "contradicts profile default", "batchlab-small"]),
    (["--model", "batchlab-tiny"], ["'batchlab-tiny'", "contradicts"]),
    (["--hardware", "h100-sxm"], ["'h100-sxm'", "does not apply with profile default"]),
    (["--model", "llama-3-70b", "--hardware", "h100-sxm"], ["'llama-3-70b'"]),
    # Named, though also the embedded demo's defaults: the user asked for them.
    (["--model", "llama-3-8b"], ["'llama-3-8b'", "contradicts"]),
    (["--hardware", "a100-80gb"], ["'a100-80gb'", "does not apply with profile default"]),
    (["--tp", "4"], ["tensor_parallel=4"]),
])
def test_simulate_refuses_a_model_or_hardware_the_profile_contradicts(capsys, args, words):
    code, _, err = run_cli(["simulate", *SMALL, "--profile", "default", *args], capsys)
    one_line_error(code, err, *words)


def test_a_config_file_contradicting_the_profile_is_refused(tmp_path, capsys):
    cfg = tmp_path / "exp.toml"
    for table in ('[model]\nname = "llama-3-70b"\n', '[hardware]\nname = "h200"\n'):
        cfg.write_text(f'[profile]\npath = "default"\n{table}')
        code, _, err = run_cli(["simulate", *SMALL, "--config", str(cfg)], capsys)
        one_line_error(code, err, "contradicts" if "model" in table else "does not apply")


def test_config_json_records_the_model_the_profile_simulates(tmp_path, capsys):
    """The defaults (llama-3-8b on an A100) give way to the profile's model and device,
    and the written config says so; naming the profile's own model is fine."""
    for extra in ([], ["--model", "batchlab-small"]):
        out = tmp_path / f"o{len(extra)}"
        code, _, err = run_cli(["simulate", *SMALL, "--profile", "default", *extra, "--out", str(out)],
                               capsys)
        assert code == 0, err
        cfg = json.loads((out / "config.json").read_text())
        assert cfg["model"]["name"] == "batchlab-small"
        assert cfg["hardware"]["name"].startswith("profiled cpu")
        meta = json.loads((out / "meta.json").read_text())["continuous"]
        assert meta["model"] == "batchlab-small" and meta["hardware"] == cfg["hardware"]["name"]
