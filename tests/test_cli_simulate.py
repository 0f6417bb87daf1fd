"""`batchlab simulate` as a user runs it: defaults, outputs, bad input."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.workload import load_trace
from experiments.cli import main

SMALL = ["--num-requests", "150", "--rate", "20"]


def run_cli(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_default_compares_three_policies_and_shows_the_point(capsys):
    code, out, err = run_cli(["simulate", "--format", "json"], capsys)
    assert code == 0
    summary = json.loads(out)
    assert list(summary) == ["static", "continuous", "chunked"]
    assert summary["static"]["completed"] == summary["continuous"]["completed"] == 1000
    assert summary["continuous"]["slot_utilization"] > 2 * summary["static"]["slot_utilization"]
    assert summary["continuous"]["output_throughput"] > 2 * summary["static"]["output_throughput"]
    assert summary["continuous"]["p99_ttft_ms"] < summary["static"]["p99_ttft_ms"]


def test_table_output_names_the_metrics(capsys):
    code, out, _ = run_cli(["simulate", *SMALL, "--policy", "static,continuous"], capsys)
    assert code == 0
    for label in ("slot utilisation", "TTFT p99 (ms)", "TPOT p50 (ms)", "queueing p50 (ms)",
                  "output tokens/s"):
        assert label in out


def test_out_dir_has_tables_and_summary(tmp_path, capsys):
    code, _, _ = run_cli(["simulate", *SMALL, "--policy", "chunked", "--out", str(tmp_path)], capsys)
    assert code == 0
    assert json.loads((tmp_path / "summary.json").read_text())["chunked"]["completed"] == 150
    req = (tmp_path / "chunked" / "requests.csv").read_text().splitlines()
    assert req[0].startswith("request_id,replica,arrival_s,prompt_len,output_len")
    assert len(req) == 151
    steps = (tmp_path / "chunked" / "steps.csv").read_text().splitlines()
    assert steps[0].startswith("replica,start_s,duration_s,num_seqs")


def test_step_by_step_and_no_step_table_give_the_same_summary(tmp_path, capsys):
    runs = {}
    for name, extra in (("default", []), ("stepped", ["--step-by-step"]),
                        ("lean", ["--no-step-table", "--out", str(tmp_path)])):
        code, out, _ = run_cli(["simulate", *SMALL, "--format", "json", *extra], capsys)
        assert code == 0
        runs[name] = json.loads(out)
    assert not list(tmp_path.glob("*/steps.csv")) and len(list(tmp_path.glob("*/requests.csv"))) == 3
    for policy, ref in runs["default"].items():
        for name in ("stepped", "lean"):
            got = runs[name][policy]
            assert got.keys() == ref.keys()
            for k, v in ref.items():
                # Without a step table the gaps come from a histogram of 0.005% resolution.
                rel = 5e-5 if name == "lean" and "itl" in k else 1e-9
                assert got[k] == pytest.approx(v, rel=rel, nan_ok=True), (name, policy, k)


def test_same_seed_gives_identical_files(tmp_path, capsys):
    for d in ("a", "b"):
        assert run_cli(["simulate", *SMALL, "--seed", "5", "--out", str(tmp_path / d)], capsys)[0] == 0
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert len(files) == 9  # config, meta, summary + 3 policies x 2 tables
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    run_cli(["simulate", *SMALL, "--seed", "6", "--out", str(tmp_path / "c")], capsys)
    assert (tmp_path / "c/static/requests.csv").read_bytes() != (tmp_path / "a/static/requests.csv").read_bytes()


def test_toml_config(tmp_path, capsys):
    cfg = tmp_path / "exp.toml"
    cfg.write_text("""
[workload]
source = "uniform"
num_requests = 50
rate = 5.0
[workload.output]
dist = "uniform"
low = 4
high = 20
[scheduler]
policy = "chunked"
max_num_seqs = 8
max_num_batched_tokens = 512
[model]
name = "qwen2.5-0.5b"
[hardware]
name = "l4"
""")
    code, out, _ = run_cli(["simulate", "--config", str(cfg), "--format", "json"], capsys)
    assert code == 0
    assert json.loads(out)["chunked"]["completed"] == 50


@pytest.mark.parametrize("args,expect", [
    (["--policy", "fifo"], "unknown policy 'fifo'"),
    (["--hardware", "tpu9"], "unknown hardware preset 'tpu9'"),
    (["--model", "gpt-5"], "unknown model preset 'gpt-5'"),
    (["--rate", "-1"], "workload.rate"),
    (["--max-num-seqs", "0"], "scheduler.max_num_seqs"),
    (["--admission", "random"], "unknown admission order 'random'"),
    (["--rate", "fast"], "--rate: invalid float value"),
    (["--config", "/nonexistent.toml"], "/nonexistent.toml: config file not found"),
])
def test_bad_input_is_one_line_exit_2(args, expect):
    p = subprocess.run([sys.executable, "-m", "experiments.cli", "simulate", *SMALL, *args],
                       capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert expect in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "Traceback" not in p.stderr


def test_wrong_type_in_toml_names_the_field(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[scheduler]\nmax_num_seqs = "many"\n')
    p = subprocess.run([sys.executable, "-m", "experiments.cli", "simulate", "--config", str(cfg)],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.strip() == (f"batchlab: error: {cfg}: scheduler.max_num_seqs: Input should be a "
                                "valid integer, unable to parse string as an integer (got 'many')")


@pytest.mark.parametrize("extra", [[], ["--profile", "default"]])
def test_simulation_needs_no_torch(extra):
    """A capacity planner installs without the backend extra: torch must not be imported."""
    code = ("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
            "from experiments.cli import main\n"
            f"sys.exit(main(['simulate', '--num-requests', '50', '--format', 'json', *{extra!r}]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)


def test_a_trace_named_on_the_command_line_is_replayed_whole_at_its_own_times(tmp_path, capsys):
    """The embedded default's size and rate (1000 requests at 14/s) are its chat preset's;
    they must not truncate or rescale a trace the user names."""
    trace = Path(__file__).parent / "data" / "azure_conv_300.csv"
    code, _, _ = run_cli(["simulate", "--workload", str(trace), "--policy", "continuous",
                          "--out", str(tmp_path)], capsys)
    assert code == 0
    rows = list(csv.DictReader((tmp_path / "continuous" / "requests.csv").open()))
    assert len(rows) == 300
    first = min(float(r["arrival_s"]) for r in rows)
    last = max(float(r["arrival_s"]) for r in rows)
    want = load_trace(str(trace))
    assert last - first == pytest.approx(want.arrival[-1] - want.arrival[0])


def test_ctrl_c_keeps_the_policies_simulated_so_far(tmp_path, capsys, monkeypatch):
    """Ctrl-C during the second policy: the first one's results and the second's partial
    ones are written, no third policy runs, exit 130."""
    import experiments.simulate_cmd as cmd
    real, calls = cmd.simulate, []

    def simulate(*args, progress, **kw):
        calls.append(1)
        left = [0]

        def pressed(k: int) -> None:
            progress(k)
            left[0] += k
            if len(calls) == 2 and left[0] >= 50:
                raise KeyboardInterrupt
        return real(*args, progress=pressed, **kw)
    monkeypatch.setattr(cmd, "simulate", simulate)
    code, out, err = run_cli(["simulate", *SMALL, "--out", str(tmp_path), "--format", "json"], capsys)
    assert code == 130 and len(calls) == 2
    assert "(interrupted)" in err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert list(summary) == ["static", "continuous"]
    assert summary["static"]["completed"] == 150
    assert 50 <= summary["continuous"]["completed"] < 150
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["continuous"]["interrupted"] and not meta["static"]["interrupted"]
    assert len((tmp_path / "continuous" / "requests.csv").read_text().splitlines()) > 50
