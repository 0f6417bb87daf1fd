"""`batchlab run` as a user runs it: the simulator's outputs, one-line errors."""
from __future__ import annotations

import json

import pytest

from batchlab.experiments.cli import main
from tests.checkpoints import tiny_checkpoint
from tests.helpers import SMALL_RUN, run_cli

pytestmark = pytest.mark.backend  # `batchlab run` serves on the torch backend

def test_json_summary_matches_simulate_keys(capsys):
    slo = ["--slo-ttft-ms", "2000"]
    code, out, _ = run_cli(["run", *SMALL_RUN, *slo, "--policy", "continuous,chunked", "--format", "json"],
                           capsys)
    assert code == 0
    real = json.loads(out)
    assert list(real) == ["continuous", "chunked"]
    assert real["chunked"]["completed"] == 6
    code, out, _ = run_cli(["simulate", "--num-requests", "6", "--rate", "inf", "--model",
                            "batchlab-tiny", "--hardware", "l4", *slo, "--format", "json"], capsys)
    assert code == 0
    assert set(json.loads(out)["continuous"]) == set(real["continuous"])


def test_out_dir_has_the_simulators_tables(tmp_path, capsys):
    code, out, err = run_cli(["run", *SMALL_RUN, "--out", str(tmp_path), "--threads", "1"], capsys)
    assert code == 0
    assert "output tokens/s" in out and "batchlab-tiny" in out
    assert json.loads((tmp_path / "summary.json").read_text())["continuous"]["completed"] == 6
    req = (tmp_path / "continuous" / "requests.csv").read_text().splitlines()
    assert req[0].startswith("request_id,replica,arrival_s,prompt_len,output_len") and len(req) == 7
    steps = (tmp_path / "continuous" / "steps.csv").read_text().splitlines()
    assert steps[0].startswith("replica,start_s,duration_s,num_seqs")
    meta = json.loads((tmp_path / "meta.json").read_text())["continuous"]
    assert meta["world"] == "real" and meta["threads"] == 1 and meta["dtype"] == "float32"


def test_config_file(tmp_path, capsys):
    cfg = tmp_path / "exp.toml"
    cfg.write_text('[workload]\nsource = "uniform"\nnum_requests = 3\nrate = 50.0\n'
                   '[workload.prompt]\ndist = "fixed"\nvalue = 12\n'
                   '[workload.output]\ndist = "fixed"\nvalue = 4\n'
                   '[scheduler]\npolicy = "chunked"\nmax_num_batched_tokens = 8\n'
                   '[model]\nname = "batchlab-tiny"\nthreads = 1\n')
    code, out, _ = run_cli(["run", "--config", str(cfg), "--kv-memory", "8MiB", "--no-progress",
                            "--format", "json"], capsys)
    assert code == 0
    s = json.loads(out)["chunked"]
    assert s["completed"] == 3 and s["total_output_tokens"] == 12


@pytest.mark.parametrize("args, msg", [
    (["--model", "no-such-model"], "unknown backend model 'no-such-model'"),
    (["--model", "llama-3-8b"], "simulator-only preset"),
    (["--model", "/nonexistent/ckpt"], "does not exist"),
    (["--dtype", "int3"], "unknown dtype"),
    (["--kv-memory", "lots"], "memory budget"),
    (["--time-scale", "-1"], "run.time_scale (--time-scale): expected a finite number >= 0"),
    (["--replicas", "2"], "one replica"),
    (["--hardware", "h100-sxm"], "--hardware does not apply to batchlab run"),
    (["--tp", "2"], "--tp does not apply to batchlab run"),
    (["--profile", "default"], "calibrated for a different model than batchlab-tiny"),
    (["--router", "least_loaded"], "--router does not apply to batchlab run"),
])
def test_bad_input_is_one_line_exit_2(args, msg, capsys):
    code, _, err = run_cli(["run", *SMALL_RUN, *args], capsys)
    assert code == 2
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("batchlab: error")]
    assert len(lines) == 1 and msg in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("command, table", [("run", '[hardware]\nname = "h100-sxm"'),
                                            ("validate", '[hardware]\ntensor_parallel = 2')])
def test_a_config_table_the_command_cannot_honour_is_an_error(tmp_path, capsys, command, table):
    cfg = tmp_path / "c.toml"
    cfg.write_text(table + "\n")
    code, _, err = run_cli([command, "--config", str(cfg), *SMALL_RUN], capsys)
    assert code == 2 and f"does not apply to batchlab {command}" in err, err
    assert err.startswith("batchlab: error: [") and len(err.strip().splitlines()) == 1


def test_cuda_without_gpu_is_refused(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    code, _, err = run_cli(["run", *SMALL_RUN, "--device", "cuda"], capsys)
    assert code == 2 and "no CUDA GPU" in err


def test_unsupported_checkpoint_is_refused(tmp_path, capsys):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}')
    code, _, err = run_cli(["run", *SMALL_RUN, "--model", str(tmp_path)], capsys)
    assert code == 2 and "unsupported architecture 'gpt2'" in err



def test_backend_settings_from_toml(tmp_path, capsys):
    """[model] kv_memory/matmul and [run] time_scale come from a config file too."""
    cfg = tmp_path / "run.toml"
    cfg.write_text('[workload]\nnum_requests = 3\nrate = 50.0\n'
                   '[model]\nname = "batchlab-tiny"\nkv_memory = "16MiB"\nmatmul = "torch"\n'
                   '[run]\ntime_scale = 0.0\n')
    out = tmp_path / "out"
    assert main(["run", "--config", str(cfg), "--no-progress", "--out", str(out)]) == 0
    meta = json.loads((out / "meta.json").read_text())["continuous"]
    assert meta["kv_budget_bytes"] == 16 * 2**20
    assert (meta["matmul"], meta["time_scale"]) == ("torch", 0.0)


@pytest.mark.parametrize("damage", ["truncated safetensors", "junk pytorch_model.bin"])
@pytest.mark.parametrize("command", [
    ["run", *SMALL_RUN],
    ["calibrate", "--grid", "quick", "--no-progress"],
    ["validate", *SMALL_RUN, "--profile", "default"],
])
def test_corrupt_weights_are_one_line_exit_2(tmp_path, capsys, damage, command):
    ckpt = tmp_path / "ckpt"
    tiny_checkpoint(ckpt)
    weights = ckpt / "model.safetensors"
    if damage.startswith("truncated"):
        weights.write_bytes(weights.read_bytes()[:5000])
    else:
        weights.unlink()
        (ckpt / "pytorch_model.bin").write_bytes(b"junk\n")
    extra = ["--out", str(tmp_path / "p.json")] if command[0] == "calibrate" else []
    code, _, err = run_cli([*command, *extra, "--model", str(ckpt)], capsys)
    assert code == 2, err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("batchlab")]
    assert len(lines) == 1 and "cannot load the weights" in lines[0] and str(ckpt) in lines[0], err
    assert "Traceback" not in err


def test_requests_beyond_the_context_limit_are_rejected(tmp_path, capsys):
    """A checkpoint's max_position_embeddings is the default max_model_len: longer
    requests are rejected with the reason (as vLLM), never served at untrained
    positions; a max_model_len beyond it is an error. The model size is readable."""
    import json
    from batchlab.backend.models import params_label
    from batchlab.backend.runtime import Runtime
    tiny_checkpoint(tmp_path / "ckpt", max_positions=64)
    base = ["run", "--model", str(tmp_path / "ckpt"), "--kv-memory", "16MiB", "--no-progress"]
    code, _, err = run_cli([*base, "--workload", "uniform", "--num-requests", "3", "--rate", "inf",
                            "--max-prompt-len", "62", "--max-output-len", "4", "--out",
                            str(tmp_path / "out")], capsys)
    assert code == 0, err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["continuous"]["rejected"] == 3
    rows = (tmp_path / "out" / "continuous" / "requests.csv").read_text()
    assert "exceeds max_model_len=64" in rows
    params = Runtime(str(tmp_path / "ckpt"), kv_memory="16MiB").spec.params
    assert params < 1e6 and f"({params_label(params)} params" in err and "(0M params" not in err
    code, _, err = run_cli([*base, "--num-requests", "2", "--max-model-len", "65"], capsys)
    assert code == 2 and "exceeds the model's context length of 64" in err
