"""`vllm bench serve --save-result` JSON files as a source for calibrate --from-served
(calibration/served_bench/bench_serve.py): read as the shared table's rows, fitted the same,
and every bad field a one-line error naming the file and the field."""
from __future__ import annotations

import dataclasses
import json

import pytest

from batchlab.calibration.served_bench.bench_serve import ServeSetting, read_bench_serve
from batchlab.calibration.served_bench.read import read_benchmarks
from tests.helpers import cli, one_line_error
from tests.test_served_bench import line, table

# (users, mean TTFT ms, mean TPOT ms): Qwen3-32B on two H100s, 512 prompt and 24 output tokens
RUNS = [(1, 41, 10.1), (2, 42, 10.3), (3, 43, 10.4), (4, 44, 10.6), (6, 46, 10.8), (8, 48, 11.0),
        (12, 52, 11.5), (16, 56, 12.0), (32, 90, 15.0)]


def result(users: int, ttft: float, tpot: float, **change) -> dict:
    """One run's file as vllm-project/vllm @ 009e6d4 vllm/benchmarks/serve.py writes it."""
    n = 4 * users
    data = {"date": "20261206-120000", "endpoint_type": "openai", "backend": "openai", "label": None,
            "model_id": "Qwen/Qwen3-32B", "tokenizer_id": "Qwen/Qwen3-32B", "num_prompts": n,
            "request_rate": "inf", "burstiness": 1.0, "max_concurrency": users, "duration": 12.5,
            "completed": n, "failed": 0, "total_input_tokens": 512 * n, "total_output_tokens": 24 * n,
            "request_throughput": n / 12.5, "request_goodput": None, "output_throughput": 24 * n / 12.5,
            "total_token_throughput": 536 * n / 12.5, "max_output_tokens_per_s": 900.0,
            "max_concurrent_requests": users, "mean_ttft_ms": ttft, "median_ttft_ms": ttft, "std_ttft_ms": 1.0,
            "p99_ttft_ms": ttft * 1.2, "mean_tpot_ms": tpot, "median_tpot_ms": tpot, "std_tpot_ms": 0.1,
            "p99_tpot_ms": tpot * 1.1, "mean_itl_ms": tpot, "mean_e2el_ms": ttft + 23 * tpot}
    data.update(change)
    return {k: v for k, v in data.items() if v is not ...}


def folder(tmp_path, runs=RUNS, **change):
    d = tmp_path / "runs"
    d.mkdir(exist_ok=True)
    for users, ttft, tpot in runs:
        (d / f"openai-infqps-concurrency{users}-Qwen3-32B.json").write_text(json.dumps(result(users, ttft, tpot,
                                                                                            **change)))
    return d


def test_a_run_reads_as_the_tables_row_of_the_same_configuration(tmp_path):
    rows = read_bench_serve([folder(tmp_path)], ServeSetting("h100-sxm", 2))
    same = read_benchmarks(table(tmp_path, *(line(c=u, tp=2, isl=512, osl=24, ttft=str(a), tpot=str(b))
                                             for u, a, b in RUNS)))
    strip = {"line": 0, "source": "", "engine_version": ""}  # the JSON names no engine version
    assert [dataclasses.replace(r, **strip) for r in rows] == [dataclasses.replace(r, **strip) for r in same]
    assert rows[0].source.endswith("concurrency1-Qwen3-32B.json")
    # --save-detailed's per-request lengths, where present, give the same lengths
    (d := tmp_path / "detailed").mkdir()
    (d / "r.json").write_text(json.dumps(result(4, 44, 10.6, input_lens=[512] * 16, output_lens=[24] * 16)))
    (row,) = read_bench_serve([d], ServeSetting("h100-sxm", 2, "fp8"))
    assert (row.isl, row.osl, row.dtype, row.precision) == (512, 24, "fp8", "fp8")


def test_calibrate_fits_the_json_runs_as_it_fits_the_same_table(tmp_path):
    runs = folder(tmp_path)
    csv = table(tmp_path, *(line(c=u, tp=2, isl=512, osl=24, ttft=str(a), tpot=str(b)) for u, a, b in RUNS))
    reports = []
    for source, extra in ((runs, ["--gpu", "h100-sxm", "--tensor-parallel", "2"]), (csv, [])):
        code, text, err = cli(["calibrate", "--from-served", str(source), *extra, "--leave-out", "none",
                               "--out", str(tmp_path / "s.json"), "--format", "json"])
        assert code == 0, err
        reports.append(json.loads(text))
    assert reports[0]["terms"] == reports[1]["terms"]


@pytest.mark.parametrize("change, field, expected", [
    ({"mean_tpot_ms": ...}, "mean_tpot_ms", "missing"),
    ({"mean_ttft_ms": -2.0}, "mean_ttft_ms", "expected a positive number"),
    ({"request_rate": 4.0}, "request_rate", "an open loop"),
    ({"max_concurrency": None}, "max_concurrency", "missing"),
    ({"max_concurrency": 2.5}, "max_concurrency", "expected a whole number"),
    ({"failed": 3}, "failed", "requests failed"),
    ({"total_output_tokens": 0}, "total_output_tokens", "expected a positive number"),
    ({"input_lens": [512] * 15 + [700]}, "input_lens", "differ"),
    ({"model_id": "acme/unknown-7b"}, "model_id", "is not one batchlab knows"),
])
def test_a_bad_field_is_one_line_naming_the_file_and_field(tmp_path, change, field, expected):
    d = folder(tmp_path, runs=[(4, 44, 10.6)], **change)
    code, _, err = cli(["calibrate", "--from-served", str(d), "--gpu", "h100-sxm", "--tensor-parallel", "2",
                        "--out", str(tmp_path / "s.json")])
    one_line_error(code, err, f"concurrency4-Qwen3-32B.json: field {field}: ")
    assert expected in err


def test_what_the_files_do_not_say_must_be_given(tmp_path):
    d = folder(tmp_path, runs=[(4, 44, 10.6)])
    code, _, err = cli(["calibrate", "--from-served", str(d), "--out", str(tmp_path / "s.json")])
    one_line_error(code, err, "give --gpu PRESET and --tensor-parallel N")
    code, _, err = cli(["calibrate", "--from-served", str(table(tmp_path, line())), "--tensor-parallel", "2"])
    one_line_error(code, err, "--tensor-parallel applies to vllm bench serve JSON files only")
    (tmp_path / "bad.json").write_text("{not json")
    code, _, err = cli(["calibrate", "--from-served", str(tmp_path / "bad.json"), "--gpu", "h100-sxm",
                        "--tensor-parallel", "2"])
    one_line_error(code, err, f"{tmp_path / 'bad.json'}: not JSON")
    (empty := tmp_path / "empty").mkdir()
    code, _, err = cli(["calibrate", "--from-served", str(empty), "--gpu", "h100-sxm", "--tensor-parallel", "2"])
    one_line_error(code, err, "a folder with no .json files")
