"""`batchlab experiment`: each study at size="small" (seconds), checked for the
qualitative result its claim makes and for the files it writes, not for pixels."""
from __future__ import annotations

import json

import numpy as np
import pytest

from batchlab.core.config import SchedulerConfig
from batchlab.experiments.cli import main
from batchlab.experiments.studies import STUDIES, Study, get_study
from batchlab.experiments.studies.common import RowLog, preset
from batchlab.experiments.studies.seats import SeatTracker
from batchlab.experiments.studies.slo_search import max_rate
from batchlab.experiments.studies.static_vs_continuous import one_long_per_group
from batchlab.sim import simulate


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
    # study.json holds all the report reads: the report renders again from it, unchanged.
    stored = json.loads((out / "study.json").read_text())
    assert stored["provenance"]["machine"]["cpu"] and stored["elapsed_s"] == pytest.approx(result["elapsed_s"])
    assert get_study(name).report(stored) == report
    return result, out


def test_list_names_every_study_in_claim_order(capsys):
    assert main(["experiment", "--list"]) == 0
    out = capsys.readouterr().out
    names = ["batching", "static-vs-continuous", "tradeoff", "latency-vs-load", "paging",
             "prefix-caching", "kv-tiers", "fidelity", "disaggregation"]
    assert [line.split()[0] for line in out.splitlines()] == names
    assert main(["experiment", "--list", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    simulated_only = {"disaggregation"}  # no --backend variant (sim/disaggregated only)
    assert [s["name"] for s in listed] == names
    assert all(s["backend"] is (s["name"] not in simulated_only) for s in listed)


@pytest.mark.parametrize("argv, message", [
    (["experiment", "nope"], "unknown experiment 'nope'"),
    (["experiment"], "give a study NAME"),
    (["experiment", "no-backend", "--backend"], "has no --backend variant"),
])
def test_bad_input_is_one_line_exit_2(argv, message, capsys, monkeypatch):
    # Every shipped study has a backend variant; a stand-in checks the refusal.
    monkeypatch.setitem(STUDIES, "no-backend", Study("no-backend", "stand-in", lambda *a, **k: {}))
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


@pytest.mark.slow  # a real calibration or a full study: tens of seconds
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


# The backend variants below serve real requests on the CPU torch backend at size
# "small" (~10-25 s each, one batchlab-tiny load shared by all) and check what the claim
# predicts of real, noisy timings, with margins; the schedule checks are exact.
def _backend(name, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    r, out = run_small(name, tmp_path, backend=True)
    assert "Real backend (CPU)" in (out / "report.md").read_text()
    for f in r["backend"]["files"]:
        assert f in r["files"] and (out / f).stat().st_size > 0, f
    return r["backend"], r


@pytest.mark.slow
def test_static_vs_continuous_backend_variant(tmp_path):
    b, _ = _backend("static-vs-continuous", tmp_path)
    real = {p: v["real"] for p, v in b["policies"].items()}
    for p, v in b["policies"].items():  # shared scheduler, closed loop: the same steps
        assert b["same_schedule_as_sim"][p], p
        assert v["real"]["slot_utilization"] == pytest.approx(v["sim"]["slot_utilization"], abs=1e-12)
        assert v["real"]["completed"] == 32
    assert real["static"]["slot_utilization"] == pytest.approx(b["static_expected_utilization"], abs=1e-9)
    assert real["continuous"]["slot_utilization"] > 2 * real["static"]["slot_utilization"]
    assert real["chunked"]["slot_utilization"] > 2 * real["static"]["slot_utilization"]
    # Measured on the wall clock: continuous serves more and queues less than static. The
    # policies run one after another, so another job can take the CPU from one of them: by
    # how much is measured (slowdown against steps timed first) and a busy run is served
    # again; the margin is claimed at the reference speed, the order on the raw clock.
    for p in real:  # (a reference timed while busy makes quiet runs' slowdowns below 1)
        assert real[p]["slowdown"] > 0 and real[p]["reference_speed_throughput"] == pytest.approx(
            real[p]["output_throughput"] * real[p]["slowdown"]), p
    assert real["continuous"]["reference_speed_throughput"] > 1.3 * real["static"]["reference_speed_throughput"]
    assert real["continuous"]["output_throughput"] > real["static"]["output_throughput"]
    assert real["continuous"]["median_queueing_delay_ms"] < real["static"]["median_queueing_delay_ms"]


@pytest.mark.slow
def test_tradeoff_backend_variant(tmp_path):
    b, _ = _backend("tradeoff", tmp_path)
    rows = b["sweep"]["continuous"]
    assert [x["users"] for x in rows] == [1, 8, 32, 96]
    # Measured on the wall clock, each point after the others: another job can take the CPU
    # from one of them. By how much is measured (its steps against the same sizes' steps
    # timed first) and a busy point is served again; the ratios are claimed at that speed.
    for x in rows:
        assert x["slowdown"] > 0 and x["reference_speed_throughput"] == pytest.approx(
            x["output_throughput"] * x["slowdown"])
    thr = [x["reference_speed_throughput"] for x in rows]
    per_user = [x["reference_speed_per_user"] for x in rows]
    assert thr[1] > 2 * thr[0] and max(thr) > 4 * thr[0]  # total tokens/s rises with the batch
    assert per_user[-1] < per_user[1] < per_user[0] * 1.05 and per_user[-1] < 0.5 * per_user[0]
    assert set(b["reference_ms"]) == set(range(1, 97)) and b["reruns"] <= len(rows)
    # The TPOT landmark is where the measured p50 first reaches the limit (5x one user's).
    # Whether the sweep reaches it depends on the machine and its load, so the test checks
    # that the landmark says what the rows measured, not that the machine crossed it.
    lm, limit = b["landmarks"]["continuous"], b["tpot_limit_ms"]
    tpot = [x["median_tpot_ms"] for x in rows]
    assert tpot[0] < limit
    first = next((i for i, t in enumerate(tpot) if t >= limit), None)
    if first is None:
        assert lm["tpot_p50_crosses_at"] is None
    else:
        assert rows[first - 1]["users"] < lm["tpot_p50_crosses_at"] <= rows[first]["users"]
    # The small KV pool runs out at the largest point only, where the simulated scheduler says.
    assert [x["preemptions"] > 0 for x in rows] == [False, False, False, True]
    assert [x["preemptions"] for x in rows] == [x["sim_preemptions"] for x in rows]


@pytest.mark.slow
def test_latency_vs_load_backend_variant(tmp_path):
    b, _ = _backend("latency-vs-load", tmp_path)
    sw = b["sweep"]
    assert [x["rate"] for x in sw["continuous"]] == [4, 64]
    for p in ("continuous", "chunked"):  # a backlog shows in TTFT, not in TPOT
        low, high = sw[p]
        assert high["p99_ttft_ms"] > 3 * low["p99_ttft_ms"], p
        assert high["median_ttft_ms"] > low["median_ttft_ms"], p
        assert low["meets_slo"], p
    # Static makes a request wait for the batch running when it arrives.
    assert sw["static"][0]["p99_ttft_ms"] > 2 * sw["continuous"][0]["p99_ttft_ms"]
    assert b["max_rate"]["static"]["max_rate"] <= b["max_rate"]["continuous"]["max_rate"]
