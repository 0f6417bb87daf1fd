"""`batchlab workload stats|convert` as a user runs it, and the shared workload options
on `batchlab simulate`."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from batchlab.core.workload import load_trace
from batchlab.experiments.cli import main
from tests.bad_cases import CORPUS

DATA = Path(__file__).parent / "data"
CONV = str(DATA / "azure_conv_300.csv")


def run(args, capsys):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_stats_prints_the_description_and_the_figures(capsys):
    code, out, err = run(["workload", "stats", CONV], capsys)
    assert code == 0 and err == ""
    assert out.startswith(f"workload: azure trace {CONV}: 300 requests")
    for label in ("requests          300", "mean rate", "inter-arrival CV", "prompt", "output",
                  "p99"):
        assert label in out


def test_stats_json_and_plot(capsys, tmp_path):
    png = tmp_path / "w.png"
    code, out, err = run(["workload", "stats", CONV, "--format", "json", "--length-scale", "2",
                          "--plot", png], capsys)
    assert code == 0 and f"plot written to {png}" in err
    s = json.loads(out)
    assert s["num_requests"] == 300 and "lengths / 2" in s["workload"]
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_convert_writes_the_batchlab_format(capsys, tmp_path, suffix):
    out_path = tmp_path / f"small.{suffix}"
    code, _, err = run(["workload", "convert", DATA / "mooncake_100.jsonl", "--num-requests", 20,
                        "--max-prompt-len", 4096, "-o", out_path], capsys)
    assert code == 0 and f"wrote 20 requests to {out_path}" in err
    w = load_trace(out_path)
    assert len(w) == 20 and w.prompt_len.max() == 4096 and w.prefix_hashes is not None


def test_toml_workload_table_and_options_agree(capsys, tmp_path):
    cfg = tmp_path / "exp.toml"
    cfg.write_text(f'[workload]\nsource = "{CONV}"\nwindow_start_s = 10\nwindow_duration_s = 20\n'
                   f'length_scale = 4\n\n[scheduler]\nmax_num_seqs = 8\n')
    code, from_toml, _ = run(["workload", "stats", "--config", cfg, "--format", "json"], capsys)
    assert code == 0
    code, from_cli, _ = run(["workload", "stats", CONV, "--window-start", 10,
                             "--window-duration", 20, "--length-scale", 4, "--format", "json"],
                            capsys)
    assert json.loads(from_toml) == json.loads(from_cli)
    # the command line overrides the table, field by field
    code, out, _ = run(["workload", "stats", "--config", cfg, "--length-scale", 1, "--format",
                        "json"], capsys)
    assert "lengths /" not in json.loads(out)["workload"]


SOME_BROKEN = CORPUS[:6] + CORPUS[-6:]


@pytest.mark.parametrize("name, line, says", SOME_BROKEN, ids=[c[0] for c in SOME_BROKEN])
def test_broken_files_exit_2_with_one_line(capsys, name, line, says):
    path = DATA / "broken" / name
    code, out, err = run(["workload", "stats", path], capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"batchlab: error: {path}:{line}: ")
    assert says in err and err.count("\n") == 1


@pytest.mark.parametrize("args, says", [
    (["--rate", "-1"], "workload.rate (--rate): expected a rate in requests/s >= 1e-06 (or inf: all at once) (got -1.0)"),
    (["--window-duration", "0"], "workload.window_duration_s (--window-duration): expected a finite time in seconds > 0"),
    (["--burstiness", "2"], "burstiness applies to generated arrivals"),
])
def test_bad_options_exit_2_with_one_line(capsys, args, says):
    code, out, err = run(["workload", "stats", CONV, *args], capsys)
    assert code == 2 and says in err and err.count("\n") == 1


def test_bad_config_table(capsys, tmp_path):
    cfg = tmp_path / "exp.toml"
    cfg.write_text('[workload]\nsource = "chat"\nwindow = 5\n')
    code, _, err = run(["workload", "stats", "--config", cfg], capsys)
    assert code == 2 and f"{cfg}: workload.window: Extra inputs are not permitted" in err


def test_the_installed_command_prints_no_traceback():
    bad = DATA / "broken" / "truncated_json.jsonl"
    p = subprocess.run([sys.executable, "-m", "batchlab", "workload", "stats", str(bad)],
                       capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert p.returncode == 2
    assert p.stderr == (f"batchlab: error: {bad}:3: not valid JSON: Expecting ':' delimiter "
                        f"(column 56); expected one JSON object per line\n")


def test_simulate_takes_a_scaled_trace(capsys):
    code, out, _ = run(["simulate", "--workload", CONV, "--length-scale", "4", "--rate-scale", "2",
                        "--policy", "continuous", "--format", "json"], capsys)
    assert code == 0
    assert json.loads(out)["continuous"]["completed"] == 300


def test_source_given_twice_is_an_error(capsys):
    code, out, err = run(["workload", "stats", "chat", "--workload", "uniform"], capsys)
    assert code == 2 and out == ""
    assert err == ("batchlab: error: the workload is given twice, as SOURCE 'chat' and as "
                   "--workload 'uniform'; expected one of them\n")


@pytest.mark.parametrize("where, says", [
    ("nodir/p.png", "{d}/nodir is no such directory; expected a file in an existing directory"),
    ("afile/p.png", "{d}/afile is not a directory; expected a file in an existing directory"),
    (".", "is a directory; expected a file name such as plot.png"),
    ("p.xyz", "unknown image type .xyz; expected one of "),
])
def test_plot_path_that_cannot_be_written_is_one_line(capsys, tmp_path, where, says):
    path = tmp_path / where
    (tmp_path / "afile").write_text("mine")
    code, out, err = run(["workload", "stats", "chat", "--num-requests", 10, "--plot", path], capsys)
    assert code == 2 and out == ""  # checked before the statistics are printed
    assert err.startswith(f"batchlab: error: --plot {path}: {says.format(d=tmp_path)}")
    assert err.count("\n") == 1


def test_toml_workload_values_are_not_coerced(capsys, tmp_path):
    cfg = tmp_path / "exp.toml"
    cfg.write_text('[workload]\nsource = "chat"\nnum_requests = true\n')
    code, _, err = run(["workload", "stats", "--config", cfg], capsys)
    assert code == 2 and err == (f"batchlab: error: {cfg}: workload.num_requests: Input should "
                                 "be a valid integer (got True, a boolean)\n")
