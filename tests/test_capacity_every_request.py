"""Every request counts: a point that rejects or leaves unfinished requests fails its
criteria unless the user allows that share; the counts are in every table; a sweep's
Pareto front holds only passing points."""
from __future__ import annotations

import csv
import json

from hypothesis import given
from hypothesis import strategies as st

from batchlab.core.summary import SLO
from batchlab.experiments.capacity.point import Criteria
from batchlab.experiments.cli import main

# 1024-token context: the chat preset's longest requests are rejected at any rate.
REJECTING = ["--workload", "chat", "--num-requests", "300", "--rate", "10", "--policy", "continuous",
             "--max-model-len", "1024", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "60", "--workers", "1"]


@given(completed=st.integers(0, 1000), rejected=st.integers(0, 1000), unfinished=st.integers(0, 1000),
       share=st.floats(0, 0.99))
def test_a_sample_fails_exactly_when_more_than_the_allowed_share_is_lost(completed, rejected, unfinished, share):
    c = Criteria(SLO(ttft_ms=1e9), max_rejected_share=share)
    s = {"completed": completed, "rejected": rejected, "unfinished": unfinished, "p99_ttft_ms": 1.0}
    lost, total = rejected + unfinished, completed + rejected + unfinished
    fails = bool(c.failures(s))
    assert fails == (lost > 0 and lost > share * total)
    if fails:
        assert f"{rejected} rejected + {unfinished} unfinished of {total} requests" in c.failures(s)[0]


def test_rejected_requests_fail_the_point_unless_a_share_is_allowed(capsys):
    assert main(["capacity", "max-rate", *REJECTING, "--format", "json"]) == 1
    strict = json.loads(capsys.readouterr().out)
    points = strict["points"]["continuous"]
    assert points and all(not p["passes"] for p in points)
    assert all(p["rejected"] > 0 and p["requests"] == 300 for p in points)
    assert all("rejected" in p["failures"] for p in points)
    assert strict["answers"][0]["answer"] is None and strict["answers"][0]["rejected"] > 0

    share = max(p["rejected"] for p in points) / 300 + 0.01
    assert main(["capacity", "max-rate", *REJECTING, "--max-rejected-share", str(share), "--format", "json"]) == 0
    lenient = json.loads(capsys.readouterr().out)["answers"][0]
    assert lenient["answer"] > 0 and 0 < lenient["rejected"] <= share * 300


def test_the_answer_table_and_the_best_point_show_the_counts(tmp_path, capsys):
    assert main(["capacity", "max-rate", *REJECTING, "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "a stable queue and every request served" in out
    header = next(line for line in out.splitlines() if "max rate" in line)
    assert "rejected" in header and "unfinished" in header
    assert "rejected and 0 unfinished of 300" in out
    for stem in ("answers", "points"):
        with open(tmp_path / f"{stem}.csv") as f:
            row = next(csv.DictReader(f))
        assert int(row["rejected"]) > 0 and row["unfinished"] == "0"


def test_a_sweep_point_that_rejects_is_off_the_front(tmp_path, capsys):
    grid = tmp_path / "grid.toml"
    grid.write_text("""
[workload]
source = "chat"
num_requests = 200
rate = 5.0
[run.slo]
ttft_ms = 5000.0
[grid]
"scheduler.max_model_len" = [1024, 8192]
policy = ["continuous"]
""")
    assert main(["sweep", "--config", str(grid), "--out", str(tmp_path / "o"), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    with open(tmp_path / "o" / "results.csv") as f:
        short, full = list(csv.DictReader(f))
    assert int(short["rejected"]) > 0 and short["passes"] == "False"
    assert full["rejected"] == "0" and full["passes"] == "True"
    front = json.loads((tmp_path / "o" / "sweep.json").read_text())["pareto"]
    assert [r["point"] for r in front] == [1]
    assert f"point 0: {short['rejected']} rejected, 0 unfinished of 200" in out


def test_rejections_at_any_load_stop_the_search_at_once_with_the_share_to_allow(capsys):
    """Rejections are decided per request on arrival: no rate or replica count helps, so
    the search stops at its first point and names the share that would allow them."""
    for kind in ("max-rate", "replicas"):
        assert main(["capacity", kind, *REJECTING, "--format", "json"]) == 1
        r = json.loads(capsys.readouterr().out)
        (points,) = r["points"].values()
        a = r["answers"][0]
        assert len(points) == 1 and a["answer"] is None and not a["error"]
        share = points[0]["rejected"] / 300
        allowed = float(a["stopped"].split("--max-rejected-share ")[1])
        assert share <= allowed <= share * 1.1 + 1e-9
    assert main(["capacity", "max-rate", *REJECTING, "--max-rejected-share", str(allowed), "--format", "json"]) == 0
    capsys.readouterr()


@given(completed=st.integers(0, 1000), rejected=st.integers(0, 1000), unfinished=st.integers(0, 1000),
       too_long=st.integers(0, 1000), share=st.floats(0, 0.99), count=st.booleans())
def test_requests_longer_than_the_context_fail_a_sample_only_when_counted(completed, rejected, unfinished,
                                                                          too_long, share, count):
    too_long = min(too_long, rejected)  # they are among the rejected
    c = Criteria(SLO(ttft_ms=1e9), max_rejected_share=share, count_too_long=count)
    s = {"completed": completed, "rejected": rejected, "unfinished": unfinished, "too_long": too_long,
         "p99_ttft_ms": 1.0}
    lost = rejected + unfinished - (0 if count else too_long)
    total = completed + rejected + unfinished
    assert bool(c.failures(s)) == (lost > 0 and lost > share * total)


# Llama-2-7B's context is 4,096 tokens: 12 of these 300 conversations are longer.
TOO_LONG = ["--workload", "tests/data/azure_conv_300.csv", "--model", "llama-2-7b", "--hardware", "h100-sxm",
            "--policy", "chunked", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100", "--workers", "1"]


def test_a_request_longer_than_the_models_context_is_reported_but_does_not_veto(capsys, monkeypatch):
    monkeypatch.chdir(__file__.rsplit("/tests/", 1)[0])
    assert main(["capacity", "max-rate", *TOO_LONG, "--format", "json"]) == 0
    r = json.loads(capsys.readouterr().out)
    a = r["answers"][0]
    assert a["answer"] > 0 and a["too_long"] == 12 and a["rejected"] >= 12 and a["gpus"] == 1
    assert all(p["too_long"] == 12 for p in r["points"]["chunked"])

    assert main(["capacity", "max-rate", *TOO_LONG, "--count-too-long"]) == 1
    out = capsys.readouterr().out
    assert "12 of 300 requests are rejected at any load" in out and "--max-rejected-share 0.04" in out
    row = next(line for line in out.splitlines() if line.startswith("chunked "))
    assert row.split()[1:5] == ["-", "-", "-", "-"]  # no rate, band or multiple where nothing passed

    # a max_model_len the user set below the context: what it rejects still counts
    assert main(["capacity", "max-rate", *TOO_LONG, "--max-model-len", "2048"]) == 1
    assert "7 of 300 requests are rejected at any load" in capsys.readouterr().out


def test_a_failed_replicas_row_shows_no_gpu_count(capsys, monkeypatch):
    monkeypatch.chdir(__file__.rsplit("/tests/", 1)[0])
    assert main(["capacity", "replicas", *TOO_LONG, "--count-too-long", "--candidate", "llama-2-7b:2:h100-sxm",
                 "--format", "json"]) == 1
    a = json.loads(capsys.readouterr().out)["answers"][0]
    assert a["answer"] is None and a["gpus"] is None and a["too_long"] == 12
