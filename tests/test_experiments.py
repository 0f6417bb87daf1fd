"""`batchlab experiment`: each study at size="small" (seconds), checked for the
qualitative result its claim makes and for the files it writes, not for pixels."""
from __future__ import annotations

import json

import numpy as np
import pytest

from core.config import SchedulerConfig
from experiments.cli import main
from experiments.studies import get_study
from experiments.studies.common import RowLog, preset
from experiments.studies.seats import SeatTracker
from experiments.studies.slo_search import max_rate
from experiments.studies.static_vs_continuous import one_long_per_group
from sim import simulate


def run_small(name, tmp_path, **kw):
    out = tmp_path / name
    result = get_study(name).run(out, "small", quiet=True, **kw)
    for f in result["files"]:
        assert (out / f).is_file() and (out / f).stat().st_size > 0, f
    assert "report.md" in result["files"]
    assert any(f.endswith(".png") for f in result["files"])
    report = (out / "report.md").read_text()
    assert "**Claim:**" in report and "**Measured:**" in report
    for f in result["files"]:
        if f.endswith(".png"):
            assert f"]({f})" in report, f"{f} not linked from report.md"
    return result, out


def test_list_names_every_study_in_claim_order(capsys):
    assert main(["experiment", "--list"]) == 0
    out = capsys.readouterr().out
    names = ["batching", "static-vs-continuous", "tradeoff", "latency-vs-load"]
    assert [line.split()[0] for line in out.splitlines()] == names
    assert main(["experiment", "--list", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in listed] == names and listed[0]["backend"] is True


@pytest.mark.parametrize("argv, message", [
    (["experiment", "nope"], "unknown experiment 'nope'"),
    (["experiment"], "give a study NAME"),
    (["experiment", "tradeoff", "--backend"], "has no --backend variant"),
])
def test_bad_input_is_one_line_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_batching_8_sequences_cost_about_one(tmp_path):
    r, _ = run_small("batching", tmp_path)
    for s in r["roofline"]:
        assert 1.0 < s["step_ratio_8_vs_1"] < 1.1  # weights read once per step
        assert 7.0 < s["speedup_8_vs_1"] < 8.0
    a100 = r["roofline"][0]
    assert a100["hardware"] == "a100-80gb" and 100 < a100["double_time_batch"] < a100["kv_max_batch"]


def test_batching_step_time_grows_and_throughput_bends(tmp_path):
    r, out = run_small("batching", tmp_path)
    rows = [line.split(",") for line in (out / "roofline.csv").read_text().splitlines()[1:]]
    a100 = [(int(b), float(t), float(tps)) for hw, b, t, tps, *_ in rows if hw == "a100-80gb"]
    times = [t for _, t, _ in a100]
    assert times == sorted(times)
    gain = [tps / b for b, _, tps in a100]  # tokens/s per sequence falls: the curve bends
    assert gain == sorted(gain, reverse=True) and gain[-1] < 0.5 * gain[0]


def test_static_vs_continuous_utilisation(tmp_path):
    r, _ = run_small("static-vs-continuous", tmp_path)
    p = r["policies"]
    st, co, ch = p["static"], p["continuous"], p["chunked"]
    # Each static batch holds exactly one long reply: utilisation is the batch arithmetic.
    assert st["slot_utilization"] == pytest.approx(r["static_expected_utilization"], abs=1e-9)
    assert 0.125 < st["slot_utilization"] < 0.25
    assert co["slot_utilization"] > 3 * st["slot_utilization"]
    assert ch["slot_utilization"] >= co["slot_utilization"]
    assert co["seat_occupancy"] > co["slot_utilization"]  # prefill-only steps pause decodes
    assert co["output_throughput"] > 3 * st["output_throughput"]
    assert co["median_queueing_delay_ms"] < st["median_queueing_delay_ms"] / 3


def test_tradeoff_tpot_rises_throughput_saturates_kv_runs_out(tmp_path):
    r, _ = run_small("tradeoff", tmp_path)
    rows = r["sweep"]["continuous"]
    tpot = [x["median_tpot_ms"] for x in rows]
    per_user = [x["per_user_tokens_per_s"] for x in rows]
    thr = [x["output_throughput"] for x in rows]
    assert tpot == sorted(tpot) and per_user == sorted(per_user, reverse=True)
    assert thr[1] > thr[0] and max(thr) > 20 * thr[0]
    peak = thr.index(max(thr))
    assert 0 < peak < len(thr) - 1 or thr[-1] < 1.1 * thr[-2]  # rises, then saturates
    lm = r["landmarks"]["continuous"]
    assert lm["tpot_p50_crosses_at"] is not None and rows[0]["median_tpot_ms"] < 100
    assert lm["first_preemption_users"] == rows[-1]["users"]  # only the largest runs out of KV
    assert all(x["preemptions"] == 0 for x in rows[:-1])


def test_latency_vs_load_max_rate_ordering(tmp_path):
    r, _ = run_small("latency-vs-load", tmp_path)
    lim = {p: v["max_rate"] for p, v in r["max_rate"].items()}
    assert lim["chunked"] >= lim["continuous"] > lim["static"]
    for p, v in r["max_rate"].items():  # the search stopped within its tolerance
        assert v["failing_rate"] - v["max_rate"] <= max(0.05, 0.01 * v["failing_rate"]) + 1e-9
    co = r["sweep"]["continuous"]
    assert co[-1]["p99_ttft_ms"] > 10 * co[0]["p99_ttft_ms"]
    assert co[0]["meets_slo"] and not co[-1]["meets_slo"]


def test_cli_writes_report_and_json(tmp_path, capsys):
    out = tmp_path / "svc"
    assert main(["experiment", "static-vs-continuous", "--small", "--out", str(out),
                 "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["name"] == "static-vs-continuous"
    assert {"report.md", "seat_timeline.png", "results.csv"} <= {p.name for p in out.iterdir()}


def test_row_log_keeps_rows_before_close(tmp_path):
    log = RowLog(tmp_path / "t.csv", ["a", "b"])
    log.add({"a": 1, "b": float("nan")})
    assert (tmp_path / "t.csv").read_text().splitlines() == ["a,b", "1,"]  # flushed already
    log.close()


def test_max_rate_bisection_finds_threshold():
    res = max_rate(lambda r: r <= 7.3, start=1.0)
    assert res.rate <= 7.3 < res.failing and res.tolerance <= max(0.05, 0.01 * res.failing)
    assert max_rate(lambda r: False, lo=0.0, hi=1.0).rate == 0.0


def test_seat_tracker_static_seats_change_only_between_batches():
    cost, blocks, meta, _ = preset("llama-3-8b", "a100-80gb")
    w = one_long_per_group(32, 8, 16)
    tracker = SeatTracker(8, max_steps=10_000)
    res = simulate(w, SchedulerConfig(policy="static", max_num_seqs=8, max_batch_delay_s=0.01),
                   cost, blocks, observer=tracker)
    holders, ran = tracker.grid()
    assert holders.shape == (len(res.steps["num_seqs"]), 8)
    assert np.array_equal(ran.sum(axis=1), res.steps["num_seqs"])
    assert tracker.occupancy == pytest.approx(res.summary()["slot_utilization"])
    batch_starts = set(np.flatnonzero(res.steps["prefill_tokens"] > 0).tolist())
    assert len(batch_starts) == 4  # 32 requests, 8 seats: four batches
    for s in range(8):  # a seat passes to another request only when a new batch starts
        col = holders[:, s]
        changes = np.flatnonzero((col[1:] != col[:-1]) & (col[1:] >= 0)) + 1
        assert set(changes.tolist()) <= batch_starts


@pytest.mark.slow
def test_batching_backend_variant(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    r, out = run_small("batching", tmp_path, backend=True)
    m = r["backend"]["models"][0]
    rows = m["rows"]
    assert [x["batch"] for x in rows] == [1, 8, 32]
    assert rows[-1]["tokens_per_s"] > 2 * rows[0]["tokens_per_s"]  # batching pays on CPU too
    assert (out / "batching_backend.png").is_file()
    assert "Real backend (CPU)" in (out / "report.md").read_text()
