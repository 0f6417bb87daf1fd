"""The backend's fast path chosen from the command line (--attention, --fused,
--cuda-graphs / --enforce-eager; [model] attention, fused, cuda_graphs): a `run` on it
serves the same greedy tokens as the reference path, records which path ran, and leaves a
run that does not ask for it as it was; impossible choices are one-line errors naming the
flag. The exactness of the kernels themselves is tests/test_backend_fast_path.py's; one
tiny model and a few short requests keep the compiles here to seconds."""
from __future__ import annotations

import json

import pytest

from tests.helpers import run_cli

FEW = ["--model", "batchlab-tiny", "--num-requests", "3", "--rate", "inf", "--max-prompt-len", "40",
       "--max-output-len", "6", "--kv-memory", "16MiB", "--threads", "1", "--no-progress"]
FAST_FIELDS = ("attention", "fused", "cuda_graphs", "one_row_decode")


def _serve_keeping_tokens(monkeypatch, args: list[str], out_dir, capsys) -> tuple[dict, object, int]:
    """`batchlab run ARGS --out out_dir` in-process: each request's generated token ids, the
    runtime it ran on and its calls of the in-place decode kernel. On a CPU the fast path's kernels run only on steps large enough
    to pay; here they run on every step, as on a GPU (as the backend's own tests do)."""
    torch = pytest.importorskip("torch")  # the backend extra
    import batchlab.backend.attention as attention
    import batchlab.backend.driver as driver
    import batchlab.experiments.commands.run as run_command
    torch.set_num_threads(1)
    tokens: dict[int, list[int]] = {}
    runtimes, in_place = [], []
    flex = attention.decode_attention

    def counted(*a, **k):  # the in-place kernel ran, not the gather
        in_place.append(1)
        return flex(*a, **k)

    monkeypatch.setattr(attention, "decode_attention", counted)
    load, serve = run_command.load_runtime, driver.run_workload

    def load_everywhere(cfg):
        rt = load(cfg)
        if rt.fast.attention == "paged":
            rt.runner.inplace_min_bytes, rt.runner.inplace_prefill = 0, True
        if rt.runner.fused is not None:
            rt.runner.fused.min_rows = 1
        runtimes.append(rt)
        return rt

    monkeypatch.setattr(run_command, "load_runtime", load_everywhere)
    def serve_keeping(*a, **k):
        k["outputs"] = k.get("outputs") if k.get("outputs") is not None else {}
        result = serve(*a, **k)
        tokens.update(k["outputs"])
        return result

    monkeypatch.setattr(driver, "run_workload", serve_keeping)
    code, _, err = run_cli(["run", *FEW, *args, "--out", str(out_dir)], capsys)
    assert code == 0, err
    return tokens, runtimes[0], len(in_place)


@pytest.mark.backend
def test_fast_run_serves_the_reference_tokens_and_records_its_path(monkeypatch, tmp_path, capsys):
    ref, ref_rt, ref_calls = _serve_keeping_tokens(monkeypatch, [], tmp_path / "ref", capsys)
    fast, fast_rt, fast_calls = _serve_keeping_tokens(monkeypatch, ["--attention", "paged", "--fused"],
                                          tmp_path / "fast", capsys)
    assert fast_rt.runner.fused is not None and fast_rt.fast.attention == "paged"
    assert ref_rt.runner.fused is None and ref_rt.fast.attention == "gather"
    assert ref_calls == 0 and fast_calls > 0
    assert len(ref) == 3 and all(len(t) == 6 for t in ref.values())
    assert fast == ref  # token for token
    ref_meta = json.loads((tmp_path / "ref" / "meta.json").read_text())["continuous"]
    fast_meta = json.loads((tmp_path / "fast" / "meta.json").read_text())["continuous"]
    assert "fast_path" not in ref_meta
    assert fast_meta["fast_path"] == "attention paged, fused"
    ref_cfg = json.loads((tmp_path / "ref" / "config.json").read_text())["model"]
    fast_cfg = json.loads((tmp_path / "fast" / "config.json").read_text())["model"]
    assert not set(FAST_FIELDS) & set(ref_cfg)  # the reference run's config.json is as before
    assert {k: fast_cfg[k] for k in ("attention", "fused")} == {"attention": "paged", "fused": True}
    assert "cuda_graphs" not in fast_cfg  # a default left out, as the reference's are


@pytest.mark.backend
def test_one_row_decode_serves_the_reference_tokens(monkeypatch, tmp_path, capsys):
    """--one-row-decode: one-sequence decode steps in native code (backend/fast/one_row*.py),
    the same greedy tokens as the reference; the path in meta.json and config.json."""
    ref, _, _ = _serve_keeping_tokens(monkeypatch, [], tmp_path / "ref", capsys)
    # one request at a time, so that its decode steps are one row
    one, rt, _ = _serve_keeping_tokens(monkeypatch, ["--one-row-decode", "--max-num-seqs", "1"], tmp_path / "one",
                                       capsys)
    ref1, _, _ = _serve_keeping_tokens(monkeypatch, ["--max-num-seqs", "1"], tmp_path / "ref1", capsys)
    assert rt.fast.one_row and rt.runner._one_row is not None
    assert one == ref1 == ref and all(len(t) == 6 for t in one.values())
    assert json.loads((tmp_path / "one" / "meta.json").read_text())["continuous"]["fast_path"].endswith(
        "one-row decode")
    assert json.loads((tmp_path / "one" / "config.json").read_text())["model"]["one_row_decode"] is True


def test_one_row_decode_on_cuda_is_one_line_naming_the_flag(capsys):
    line = _error(*run_cli(["run", *FEW, "--device", "cuda", "--one-row-decode"], capsys)[::2])
    assert "--one-row-decode" in line and "CPU" in line


def test_config_dump_leaves_the_reference_paths_fields_out():
    from batchlab.experiments.config import build_config
    assert not set(FAST_FIELDS) & set(build_config({}).model_dump()["model"])
    same = build_config({"model": {"attention": "gather", "fused": False, "cuda_graphs": False}})
    assert same.model_dump() == build_config({}).model_dump()
    chosen = build_config({"model": {"attention": "paged", "cuda_graphs": True, "device": "cuda"}})
    assert chosen.model_dump()["model"]["cuda_graphs"] is True


def _error(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("command", ["run", "serve", "validate", "calibrate"])
def test_cuda_graphs_on_a_cpu_is_one_line_naming_the_flag(command, capsys):
    model = ["--model", "batchlab-tiny"]
    line = _error(*run_cli([command, *model, "--attention", "paged", "--cuda-graphs"], capsys)[::2])
    assert "--cuda-graphs" in line and "CUDA device" in line and "cpu" in line


def test_calibrate_refuses_the_path_where_it_runs_no_backend(tmp_path, capsys):
    line = _error(*run_cli(["calibrate", "--from-run", str(tmp_path), "--attention", "paged"], capsys)[::2])
    assert "--attention" in line and "--from-run" in line


def test_cuda_graphs_need_paged_attention(capsys):
    line = _error(*run_cli(["run", *FEW, "--device", "cuda", "--cuda-graphs"], capsys)[::2])
    assert "--cuda-graphs" in line and "--attention paged" in line


def test_enforce_eager_overrides_a_configs_graphs(tmp_path, capsys):
    cfg = tmp_path / "exp.toml"
    cfg.write_text('[model]\nname = "batchlab-tiny"\ncuda_graphs = true\n')
    line = _error(*run_cli(["run", "--config", str(cfg), "--no-progress"], capsys)[::2])
    assert "model.cuda_graphs" in line
    from batchlab.experiments.cli import build_parser
    from batchlab.experiments.options import load_experiment
    args = build_parser(("run",)).parse_args(["run", "--config", str(cfg), "--enforce-eager"])
    assert load_experiment(args).model.cuda_graphs is False


@pytest.mark.parametrize("argv", [["--attention", "flat"], ["--fused=yes"], ["--cuda-graphs", "1"]])
def test_bad_flag_values_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        run_cli(["run", *FEW, *argv], capsys)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "error:" in err[-1] and (argv[0].split("=")[0] in err[-1] or argv[-1] in err[-1])


@pytest.mark.parametrize("toml, field", [('attention = "flat"', "model.attention"),
                                         ('fused = "yes"', "model.fused"),
                                         ("cuda_graphs = 1", "model.cuda_graphs")])
def test_bad_config_values_are_one_line_naming_the_field(toml, field, tmp_path, capsys):
    cfg = tmp_path / "exp.toml"
    cfg.write_text(f'[model]\nname = "batchlab-tiny"\n{toml}\n')
    line = _error(*run_cli(["run", "--config", str(cfg), "--no-progress"], capsys)[::2])
    assert field in line


def test_simulate_refuses_the_backend_fields(tmp_path, capsys):
    cfg = tmp_path / "exp.toml"
    cfg.write_text('[model]\nfused = true\n')
    line = _error(*run_cli(["simulate", "--config", str(cfg)], capsys)[::2])
    assert "[model] fused does not apply to batchlab simulate" in line
