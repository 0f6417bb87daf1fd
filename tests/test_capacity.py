"""`batchlab capacity max-rate|replicas`: the answers with their evidence, the searches'
own guarantees, the outputs, and bad input."""
from __future__ import annotations

import csv
import json

import pyarrow.parquet as pq
import pytest

from batchlab.experiments.cli import main
from batchlab.experiments.studies.slo_search import fewest

CHAT = ["--workload", "chat", "--num-requests", "300", "--rate", "10", "--policy", "chunked"]
SLO = ["--slo-ttft-ms", "1000", "--slo-tpot-ms", "60"]


def run_json(args, capsys, code=0):
    got = main(["capacity", *args, "--format", "json"])
    out, err = capsys.readouterr()
    assert got == code, err
    return json.loads(out) if out else None


def test_fewest_finds_the_threshold_with_few_evaluations():
    res = fewest(lambda n: n >= 13, 256)
    assert res.count == 13 and len(res.evaluations) <= 10
    assert fewest(lambda n: True, 8).count == 1
    assert fewest(lambda n: False, 8).count is None


def test_max_rate_answer_passes_and_the_band_above_it_fails(capsys):
    r = run_json(["max-rate", *CHAT, *SLO, "--workers", "1", "--tolerance", "0.05"], capsys)
    a = r["answers"][0]
    points = r["points"]["chunked"]
    at = [p for p in points if p["rate"] == a["answer"]]
    above = [p for p in points if p["rate"] == a["band_high"]]
    assert at[0]["passes"] and at[0]["stability"] == "stable"
    assert not above[0]["passes"]
    assert a["band_high"] - a["band_low"] <= 0.05 * a["band_high"] + 0.01 * 10 + 1e-9
    assert all(p["passes"] for p in points if p["rate"] < a["answer"])  # monotone here
    assert all(not p["passes"] for p in points if p["rate"] > a["band_high"])


def test_faster_hardware_carries_more_and_lower_efficiency_less(capsys):
    # The roofline throughout: --mem-efficiency is a roofline constant (given, it prices by
    # the roofline), so the base must be the roofline too, not the default GPU profile.
    roof = ["--cost", "roofline"]
    base = run_json(["max-rate", *CHAT, *SLO, *roof, "--workers", "1"], capsys)["answers"][0]["answer"]
    slow = run_json(["max-rate", *CHAT, *SLO, *roof, "--workers", "1", "--mem-efficiency", "0.4"], capsys)
    assert slow["answers"][0]["answer"] < base
    h100 = run_json(["max-rate", *CHAT, *SLO, *roof, "--workers", "1", "--hardware", "h100-sxm"], capsys)
    assert h100["answers"][0]["answer"] > base


def test_replicas_is_the_fewest_that_passes(capsys):
    args = ["--workload", "chat", "--num-requests", "300", "--rate", "40", "--policy", "chunked",
            *SLO, "--workers", "1", "--candidate", "llama-3-8b:1:a100-80gb,llama-3-70b:1:l4"]
    r = run_json(["replicas", *args], capsys)
    l4, big = r["answers"]
    n = l4["answer"]
    assert n and n > 1
    tried = {p["replicas"]: p["passes"] for p in r["points"][l4["label"]]}
    assert tried[n] and tried.get(n - 1) is False
    assert big["answer"] is None and "leaves no KV memory" in big["error"]


def test_serial_and_process_pool_give_the_same_points(capsys):
    args = [*CHAT, *SLO, "--policy", "continuous", "--tolerance", "0.1"]
    serial = run_json(["max-rate", *args, "--workers", "1"], capsys)
    pool = run_json(["max-rate", *args, "--workers", "2"], capsys)
    assert serial["points"] == pool["points"]


def test_outputs_csv_parquet_plot_and_the_printed_answer(tmp_path, capsys):
    # the roofline's sensitivity (a GPU profile's knobs: issue 31)
    assert main(["capacity", "max-rate", *CHAT, *SLO, "--workers", "1", "--seeds", "2", "--cost", "roofline",
                 "--sensitivity", "--gpu-hour-price", "2.5", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 sample(s) per point (2 seed(s) x 1 window(s); the seed moves arrivals and lengths)" in out
    assert "assumptions: roofline: 80% of datasheet memory bandwidth" in out
    assert "sensitivity" in out and "mem_efficiency 0.8 (assumed" in out and "low 0.6:" in out
    assert "compute_efficiency 0.6 (assumed" in out and "over the knobs" in out
    assert "allreduce_latency_s" not in out and "traffic_rate" not in out  # TP 1; max-rate's answer is a rate
    for stem in ("answers", "points", "sensitivity"):
        rows = list(csv.DictReader(open(tmp_path / f"{stem}.csv")))
        table = pq.read_table(tmp_path / f"{stem}.parquet")
        assert table.num_rows == len(rows) and table.column_names == list(rows[0])
    assert (tmp_path / "max-rate.png").stat().st_size > 10_000
    ans = json.loads((tmp_path / "capacity.json").read_text())["answers"][0]
    assert ans["cost_per_hour"] == pytest.approx(2.5)
    assert all(p["samples"] == 2 for p in json.loads((tmp_path / "capacity.json").read_text())["points"]["chunked"])


def test_an_slo_no_point_meets_says_so_with_the_best_point(capsys):
    assert main(["capacity", "max-rate", *CHAT, "--slo-ttft-ms", "1", "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert "chunked: no rate meets the criteria; best point found:" in out and "fails: p99 TTFT" in out


@pytest.mark.parametrize("args, message", [
    ([*CHAT], "capacity needs an SLO"),
    ([*CHAT, *SLO, "--gpu-hour-price", "-1"], "expected a price per GPU-hour (a positive number), got '-1'"),
    ([*CHAT, *SLO, "--gpu-hour-price", "cheap"], "expected a price per GPU-hour"),
    ([*CHAT, *SLO, "--goodput", "1.5"], "--goodput must be a share in (0, 1]"),
    ([*CHAT, *SLO, "--seeds", "0"], "--seeds must be >= 1"),
    ([*CHAT, *SLO, "--dask", "tcp://127.0.0.1:9"], "no Dask scheduler answered within"),
])
def test_bad_input_is_a_one_line_error(args, message, capsys, monkeypatch):
    from batchlab.experiments import executor
    monkeypatch.setattr(executor, "DASK_TIMEOUT_S", 1)  # no scheduler there: a short wait says so
    try:
        code = main(["capacity", "max-rate", *args, "--workers", "1"])
    except SystemExit as e:  # argparse's own check (a type), also one line and exit 2
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_bad_candidate_is_a_one_line_error(capsys):
    assert main(["capacity", "replicas", *CHAT, *SLO, "--candidate", "llama-3-8b:x:h200"]) == 2
    assert "expected MODEL:TP:HARDWARE" in capsys.readouterr().err
    assert main(["capacity", "replicas", *CHAT, *SLO, "--candidate", "llama-9:1:h200"]) == 2
    assert "unknown model preset 'llama-9'" in capsys.readouterr().err
