"""`batchlab simulate` as a user runs it: defaults, outputs, bad input."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from batchlab.core.config import SchedulerConfig
from batchlab.core.workload import load_trace
from tests.helpers import run_cli

SMALL = ["--num-requests", "150", "--rate", "20"]


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
                if isinstance(v, str):  # the stability verdict
                    assert got[k] == v
                    continue
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
    (["--policy", "fifo"], "--policy fifo: no such policy"),
    (["--hardware", "tpu9"], "unknown hardware preset 'tpu9'"),
    (["--model", "gpt-5"], "unknown model preset 'gpt-5'"),
    (["--rate", "-1"], "workload.rate"),
    (["--max-num-seqs", "0"], "scheduler.max_num_seqs"),
    (["--admission", "random"], "--admission random: no such admission order"),
    (["--rate", "fast"], "--rate: invalid float value"),
    (["--config", "/nonexistent.toml"], "/nonexistent.toml: config file not found"),
    (["--seed", "-1"], "workload.seed (--seed): expected a whole number from 0 to 2**63-1 (got -1)"),
    # Options that would be silently ignored are contradictions, not no-ops.
    (["--think-time", "2"], "think_time_s (2 s, --think-time) applies to a closed loop only; "
                            "set max_concurrency (--max-concurrency) too"),
    (["--max-batch-delay", "5", "--policy", "continuous,chunked"],
     "max_batch_delay_s (--max-batch-delay) applies to the static policy only; this run's "
     "policies: continuous, chunked"),
])
def test_bad_input_is_one_line_exit_2(args, expect):
    p = subprocess.run([sys.executable, "-m", "batchlab", "simulate", *SMALL, *args],
                       capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert expect in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "Traceback" not in p.stderr


def test_wrong_type_in_toml_names_the_field(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[scheduler]\nmax_num_seqs = "many"\n')
    p = subprocess.run([sys.executable, "-m", "batchlab", "simulate", "--config", str(cfg)],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.strip() == (f"batchlab: error: {cfg}: scheduler.max_num_seqs: Input should be a "
                                "valid integer (got 'many', a string)")


@pytest.mark.parametrize("table, given, says", [
    # Lax pydantic ran these: true as 1 seat or 1 request, "20" as a rate.
    ("scheduler", "max_num_seqs = true", "scheduler.max_num_seqs: Input should be a valid "
                                         "integer (got True, a boolean)"),
    ("workload", "num_requests = true", "workload.num_requests: Input should be a valid integer"),
    ("workload", 'rate = "20"', "workload.rate: Input should be a valid number (got '20', a string)"),
    ("model", "name = 3", "model.name: Input should be a valid string (got 3, an integer)"),
    ("hardware", 'tensor_parallel = "2"', "hardware.tensor_parallel: Input should be a valid integer"),
    ("workload", "seed = -1", "workload.seed: expected a whole number from 0 to 2**63-1"),
    ("workload.output", 'dist = "fixed"\nvalue = 2.5', "workload.output.value: Input should be a "
                                                      "valid integer (got 2.5, a float)"),
])
def test_toml_values_are_not_coerced(tmp_path, table, given, says):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(f"[{table}]\n{given}\n")
    p = subprocess.run([sys.executable, "-m", "batchlab", "simulate", "--config", str(cfg)],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.startswith(f"batchlab: error: {cfg}: {says}"), p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_toml_int_where_a_float_is_expected_is_fine(tmp_path, capsys):
    cfg = tmp_path / "ok.toml"
    cfg.write_text('[workload]\nnum_requests = 30\nrate = 20\n[hardware]\nmem_efficiency = 1\n'
                   '[run]\nslo = { ttft_ms = 2000 }\npolicies = ["continuous"]\n')
    code, out, _ = run_cli(["simulate", "--config", str(cfg), "--format", "json"], capsys)
    assert code == 0 and json.loads(out)["continuous"]["completed"] == 30


def test_an_slo_option_replaces_the_embedded_defaults_slo(capsys):
    """The default's TTFT/TPOT objectives must not be added, unseen, to the one asked for:
    every request here ends within 60 s, so all of them count as goodput."""
    code, out, _ = run_cli(["simulate", "--num-requests", "1000", "--rate", "18", "--policy",
                            "continuous", "--slo-e2el-ms", "60000"], capsys)
    assert code == 0
    assert out.rstrip().endswith("goodput SLO: E2E latency <= 60000 ms")
    code, out, _ = run_cli(["simulate", "--num-requests", "1000", "--rate", "18", "--policy",
                            "continuous", "--slo-e2el-ms", "60000", "--format", "json"], capsys)
    s = json.loads(out)["continuous"]
    assert s["p99_e2el_ms"] < 60000 and s["slo_attainment"] == 1.0
    assert s["request_goodput"] == s["request_throughput"]


def test_the_slo_in_force_is_printed_with_the_table(tmp_path, capsys):
    code, out, _ = run_cli(["simulate", *SMALL, "--policy", "continuous"], capsys)
    assert code == 0 and "goodput SLO: TTFT <= 2000 ms, TPOT <= 100 ms" in out  # the default's
    # With a config, an SLO option overrides the file's SLO field by field.
    cfg = tmp_path / "exp.toml"
    cfg.write_text('[workload]\nnum_requests = 50\n[run]\nslo = { ttft_ms = 1500 }\n')
    code, out, _ = run_cli(["simulate", "--config", str(cfg), "--slo-e2el-ms", "9000"], capsys)
    assert code == 0 and "goodput SLO: TTFT <= 1500 ms, E2E latency <= 9000 ms" in out
    cfg.write_text('[workload]\nnum_requests = 50\n')
    code, out, _ = run_cli(["simulate", "--config", str(cfg)], capsys)
    assert code == 0 and "goodput" not in out  # no SLO, no goodput row, nothing hidden


def test_out_that_is_a_file_is_one_line_before_simulating(tmp_path):
    taken = tmp_path / "summary.json"
    taken.write_text("{}")
    p = subprocess.run([sys.executable, "-m", "batchlab", "simulate", *SMALL,
                        "--out", str(taken)], capture_output=True, text=True)
    assert p.returncode == 2
    # one line: no policy's progress line was printed before it
    assert p.stderr == (f"batchlab: error: --out {taken}: is a file; expected a directory "
                        "(created if missing)\n")
    assert taken.read_text() == "{}"


def test_reused_out_dir_keeps_no_stale_policy_and_nothing_else_is_removed(tmp_path, capsys):
    assert run_cli(["simulate", *SMALL, "--policy", "static,chunked,continuous",
                    "--out", str(tmp_path)], capsys)[0] == 0
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "continuous" / "plot.png").write_text("mine too")
    assert run_cli(["simulate", *SMALL, "--policy", "static", "--out", str(tmp_path)], capsys)[0] == 0
    assert list(json.loads((tmp_path / "summary.json").read_text())) == ["static"]
    assert list(json.loads((tmp_path / "meta.json").read_text())) == ["static"]
    assert not (tmp_path / "chunked").exists()  # its tables gone, then the empty folder
    assert [p.name for p in (tmp_path / "continuous").iterdir()] == ["plot.png"]
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (tmp_path / "static").iterdir()) == ["requests.csv", "steps.csv"]


def test_an_out_dir_batchlab_did_not_write_loses_nothing(tmp_path, capsys):
    """A user's own meta.json is not a list of policies to clean up."""
    (tmp_path / "meta.json").write_text('{"data": "notes"}')
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "requests.csv").write_text("mine")
    assert run_cli(["simulate", *SMALL, "--policy", "static", "--out", str(tmp_path)], capsys)[0] == 0
    assert (tmp_path / "data" / "requests.csv").read_text() == "mine"


def test_a_bad_option_fails_before_an_earlier_run_is_cleared(tmp_path, capsys):
    assert run_cli(["simulate", *SMALL, "--policy", "static", "--out", str(tmp_path)], capsys)[0] == 0
    code, _, err = run_cli(["simulate", *SMALL, "--policy", "static", "--out", str(tmp_path),
                            "--max-model-len", "9000"], capsys)
    assert code == 2 and "max_model_len" in err
    assert list(json.loads((tmp_path / "summary.json").read_text())) == ["static"]
    assert (tmp_path / "static" / "requests.csv").exists()


def test_kv_pool_beyond_the_hardwares_memory_warns(capsys, caplog):
    # Llama-3-8B on one A100-80GB holds ~33,000 blocks of 16 tokens after its weights.
    code, _, _ = run_cli(["simulate", *SMALL, "--policy", "continuous", "--num-kv-blocks",
                          "1000000"], capsys)
    assert code == 0
    assert [r.getMessage() for r in caplog.records] == [
        "scheduler.num_kv_blocks (--num-kv-blocks) 1000000 exceeds the 33301 blocks of 16 tokens "
        "that fit in 1 x a100-80gb memory after llama-3-8b's weights; the results assume memory "
        "the hardware does not have"]
    caplog.clear()
    code, _, _ = run_cli(["simulate", *SMALL, "--policy", "continuous", "--num-kv-blocks",
                          "30000"], capsys)
    assert code == 0 and not caplog.records


def test_the_models_context_length_is_the_default_max_model_len(tmp_path, capsys):
    """As vLLM: a request whose prompt + output exceeds the context is rejected with the
    reason; a long-context model serves it; a max_model_len beyond the context is an error."""
    trace = tmp_path / "two.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0,100,20\n0.5,8000,500\n")
    base = ["simulate", "--workload", str(trace), "--policy", "chunked", "--format", "json"]
    for model, rejected in (("llama-3-8b", 1), ("llama-3.1-8b", 0)):
        code, out, err = run_cli([*base, "--model", model], capsys)
        assert code == 0, err
        assert json.loads(out)["chunked"]["rejected"] == rejected, model
    code, out, _ = run_cli([*base, "--model", "llama-3.1-8b", "--max-model-len", "8192"], capsys)
    assert code == 0 and json.loads(out)["chunked"]["rejected"] == 1
    code, _, err = run_cli([*base, "--max-model-len", "10000"], capsys)
    assert code == 2 and "exceeds the model's context length of 8192" in err and "\n" == err[-1]


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
    # Nor its 32 seats: the scheduler's default applies, unless given.
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["scheduler"]["max_num_seqs"] == SchedulerConfig().max_num_seqs == 256
    code, out, _ = run_cli(["simulate", "--workload", str(trace), "--max-num-seqs", "8"], capsys)
    assert code == 0 and "8 seats" in out


def test_ctrl_c_keeps_the_policies_simulated_so_far(tmp_path, capsys, monkeypatch):
    """Ctrl-C during the second policy: the first one's results and the second's partial
    ones are written, no third policy runs, exit 130."""
    import batchlab.sim as sim  # the simulate command calls batchlab.sim.simulate
    real, calls = sim.simulate, []

    def simulate(*args, progress, **kw):
        calls.append(1)
        left = [0]

        def pressed(k: int) -> None:
            progress(k)
            left[0] += k
            if len(calls) == 2 and left[0] >= 50:
                raise KeyboardInterrupt
        return real(*args, progress=pressed, **kw)
    monkeypatch.setattr(sim, "simulate", simulate)
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
