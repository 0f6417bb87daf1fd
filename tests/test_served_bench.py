"""Served-engine benchmark tables (calibration/served_bench/): read strictly, turned into the
closed-loop workload a row stands for, and judged (validate --served-benchmarks)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.calibration.served_bench.client import (API_TOKEN_S, LENGTH_SPREAD, benchmark_front_end,
                                                     benchmark_workload)
from batchlab.calibration.served_bench.judge import Predicted, curve_answers, judge, sides_the_rows_fix
from batchlab.calibration.served_bench.read import BenchmarkRow, in_regime, read_benchmarks
from batchlab.experiments.validation.served_benchmarks import predict
from tests.helpers import cli, one_line_error

HEADER = ("id,backend,backend_version,model_path,system,precision,isl,osl,gemm_quant_mode,moe_quant_mode,"
          "batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,silicon_ttft_ms,silicon_tpot_ms")


def line(c=8, tp=2, isl=1024, osl=128, ttft="154.2", tpot="18.04", model="Qwen/Qwen3-32B", system="h100_sxm",
         precision=""):
    return f"r{c}_{tp},vllm,0.12.0,{model},{system},{precision},{isl},{osl},,,{c},{tp},1,,1,1,{ttft},{tpot}"


def table(tmp_path, *lines, name="bench.csv"):
    path = tmp_path / name
    path.write_text("\n".join([HEADER, *lines]) + "\n")
    return path


def test_a_row_reads_as_the_configuration_it_names(tmp_path):
    (row,) = read_benchmarks(table(tmp_path, line(c=16, tp=4, isl=4096, osl=512, ttft="509.5", tpot="25.41")))
    assert (row.model, row.gpu, row.tp, row.concurrency, row.isl, row.osl) == ("qwen3-32b", "h100-sxm", 4, 16, 4096, 512)
    assert row.ttft_s == pytest.approx(0.5095) and row.tpot_s == pytest.approx(0.02541) and row.line == 2
    assert row.dtype is None  # bf16 checkpoint: the preset's own


@pytest.mark.parametrize("bad, column, expected", [
    (line(ttft="-3"), "silicon_ttft_ms", "positive time"),
    (line(tpot="x"), "silicon_tpot_ms", "expected a number"),
    (line(c="2.5"), "batch_size", "whole number"),
    (line(model="acme/unknown-7b"), "model_path", "not one batchlab can price"),
    (line(system="tpu_v5"), "system", "not one batchlab can price"),
    (line(precision="int3"), "precision", "not one batchlab can price"),
    (line(c=10 ** 7), "batch_size", "past"),
])
def test_a_bad_cell_is_named_by_file_line_and_column(tmp_path, bad, column, expected):
    path = table(tmp_path, line(c=4), bad)
    with pytest.raises(ValueError) as e:
        read_benchmarks(path)
    msg = str(e.value)
    assert f"{path}: line 3, column {column}" in msg and expected in msg and "\n" not in msg


def test_a_header_alone_or_a_missing_column_is_refused(tmp_path):
    with pytest.raises(ValueError, match="a header and no rows"):
        read_benchmarks(table(tmp_path))
    path = tmp_path / "short.csv"
    path.write_text("model_path,system\nQwen/Qwen3-32B,h100_sxm\n")
    with pytest.raises(ValueError, match="line 1: missing column"):
        read_benchmarks(path)


def test_repeats_that_agree_are_one_row_and_repeats_that_disagree_are_refused(tmp_path):
    rows = read_benchmarks(table(tmp_path, line(ttft="100", tpot="20"), line(ttft="110", tpot="22")))
    assert len(rows) == 1 and rows[0].ttft_s == pytest.approx(0.105) and rows[0].tpot_s == pytest.approx(0.021)
    with pytest.raises(ValueError, match=r"line 3, column silicon_tpot_ms: .* conflicts .* line 2"):
        read_benchmarks(table(tmp_path, line(tpot="20"), line(tpot="45"), name="b.csv"))


def test_the_command_names_a_bad_table_in_one_line(tmp_path):
    code, _, err = cli(["validate", "--served-benchmarks", str(table(tmp_path, line(tpot="0")))])
    one_line_error(code, err, "column silicon_tpot_ms", "positive time")


def row(c=8, tpot=0.02, ttft=0.1, osl=128) -> BenchmarkRow:
    return BenchmarkRow(line=2, model_id="m", model="qwen3-32b", gpu="h100-sxm", dtype=None, precision="", tp=1,
                        concurrency=c, isl=1024, osl=osl, ttft_s=ttft, tpot_s=tpot, engine_version="")


@settings(max_examples=50, deadline=None)
@given(users=st.integers(1, 300), rounds=st.integers(1, 5), latency=st.floats(0.01, 100))
def test_the_client_models_send_every_users_requests_in_a_closed_loop(users, rounds, latency):
    lock = benchmark_workload(row(c=users), "lockstep", rounds=rounds)
    spread = benchmark_workload(row(c=users), "staggered", latency_s=latency, rounds=rounds)
    for w in (lock, spread):
        assert len(w) == users * rounds and w.max_concurrency == users
        assert (w.prompt_len == 1024).all() and (w.output_len == 128).all()
    assert (lock.arrival == 0).all()
    first = spread.arrival[:users]
    assert first[0] == 0 and (np.diff(first) > 0).all() and first[-1] < latency
    assert (spread.arrival[users:] == first[-1]).all()


@settings(max_examples=50, deadline=None)
@given(users=st.integers(1, 64), isl=st.integers(1, 1 << 16))
def test_the_burst_client_reaches_the_engine_one_request_at_a_time(users, isl):
    r = dataclasses.replace(row(c=users), isl=isl)
    assert benchmark_front_end(r, "lockstep") is None and benchmark_front_end(r, "staggered") is None
    front = benchmark_front_end(r, "burst")
    assert front.serial_s == pytest.approx(API_TOKEN_S * isl) and front.delay_s == 0
    sent = benchmark_workload(r, "burst").arrival[:users]
    assert (sent == 0).all()  # every user sends at once, as the closed-loop clients start
    reach, _ = front.arrivals(sent)
    assert np.allclose(np.diff(reach), front.serial_s) and reach[0] == pytest.approx(front.serial_s)
    with pytest.raises(ValueError, match="client model 'phased'"):
        benchmark_front_end(r, "phased")


@settings(max_examples=50, deadline=None)
@given(users=st.integers(1, 64), isl=st.integers(1, 1 << 16), osl=st.integers(1, 1 << 14))
def test_the_perturbed_client_draws_lengths_near_the_rows_and_the_same_each_time(users, isl, osl):
    r = dataclasses.replace(row(c=users, osl=osl), isl=isl)
    w = benchmark_workload(r, "perturbed", rounds=3)
    assert (w.arrival == 0).all() and w.max_concurrency == users and len(w) == 3 * users
    for got, x in ((w.prompt_len, isl), (w.output_len, osl)):
        assert got.min() >= max(1, round(x * (1 - LENGTH_SPREAD))) and got.max() <= round(x * (1 + LENGTH_SPREAD))
    again = benchmark_workload(r, "perturbed", rounds=3)
    assert (again.prompt_len == w.prompt_len).all() and (again.output_len == w.output_len).all()


def test_the_perturbed_client_breaks_the_lockstep():
    # 8 users x 1024 tokens in lockstep prefill together, round after round; a few tokens'
    # difference lets them drift apart, and most prefill beside fewer others.
    r = dataclasses.replace(row(c=8, osl=256), tp=2)
    lock, perturbed = predict(r, "lockstep"), predict(r, "perturbed")
    assert 0 < perturbed.ttft_s < 0.6 * lock.ttft_s


def test_a_burst_split_by_the_front_end_waits_less_than_one_prefilled_together():
    # 8 users x 1024 tokens: in lockstep the engine prefills all eight in one step; through the
    # front end it starts on the first alone and the others join at its next step.
    r = dataclasses.replace(row(c=8, osl=16), tp=2)
    lock, burst = predict(r, "lockstep"), predict(r, "burst")
    assert 0 < burst.ttft_s < lock.ttft_s
    assert predict(r, "burst") == burst  # the same row, the same answer


def test_the_load_curve_answer_is_the_highest_concurrency_under_the_objective():
    # Measured TPOT crosses 30 ms between 16 and 32 users; the prediction, between 8 and 16.
    measured = {4: 0.010, 8: 0.015, 16: 0.025, 32: 0.040}
    priced = {4: 0.012, 8: 0.020, 16: 0.035, 32: 0.050}
    rows = [Predicted(row(c=c, tpot=t), 0.1, priced[c]) for c, t in measured.items()]
    by_objective = {a.objective_ms: a for a in curve_answers(rows, (30.0, 45.0, 5.0))}
    assert (by_objective[30.0].measured, by_objective[30.0].predicted, by_objective[30.0].steps_apart) == (16, 8, 1)
    assert (by_objective[45.0].measured, by_objective[45.0].predicted, by_objective[45.0].steps_apart) == (32, 16, 1)
    assert (by_objective[5.0].measured, by_objective[5.0].predicted, by_objective[5.0].steps_apart) == (None, None, 0)


def test_a_group_priced_on_one_side_is_flagged_and_a_mixed_one_is_not():
    slow = [Predicted(row(c=c), 0.1, 0.02 * 1.3) for c in (4, 8, 16)]
    j = judge(slow)
    assert j.tpot.slow_share == 1 and j.groups[0].one_sided and j.tpot.median == pytest.approx(0.3)
    mixed = [Predicted(row(c=c), 0.1, 0.02 * f) for c, f in ((4, 1.1), (8, 0.9), (16, 1.05), (32, 0.95))]
    assert not judge(mixed).groups[0].one_sided


def test_the_groups_no_price_could_balance_are_a_lone_row_and_rows_that_ran_less():
    four = [Predicted(row(c=c), 0.1, 0.02 * 1.3) for c in (4, 8, 16, 32)]
    lone = Predicted(dataclasses.replace(row(c=4), tp=8), 0.1, 0.02 * 0.9)
    j = judge([*four, lone])
    assert all(g.one_sided for g in j.groups)
    fixed = {g.group: why for g, why in sides_the_rows_fix(j, {p.row for p in four[:3]})}
    assert fixed == {four[0].row.group: "3 of 4 rows ran less than they state", lone.row.group: "one row"}
    # half of them ran less: a price could still put the other half on the other side
    assert [g.group for g, _ in sides_the_rows_fix(j, {p.row for p in four[:2]})] == [lone.row.group]


def test_validate_judges_a_table_end_to_end(tmp_path):
    path = table(tmp_path, line(c=4, osl=32), line(c=16, osl=32, ttft="190", tpot="22"))
    code, out, err = cli(["validate", "--served-benchmarks", str(path), "--format", "json"])
    assert code == 0, err
    j = json.loads(out)
    assert [r["row"]["concurrency"] for r in j["rows"]] == [4, 16]
    # more users share each step: the simulated closed loop prices their tokens slower
    assert j["rows"][1]["tpot_s"] > j["rows"][0]["tpot_s"] > 0
    assert j["one_sided_whatever_the_price"] == []  # two rows, neither ran less than it states
    code, text, err = cli(["validate", "--served-benchmarks", str(path), "--client", "staggered", "--rows"])
    assert code == 0, err
    assert "client model: staggered (the users' first sends spread" in text and "qwen3-32b, h100-sxm, TP 2" in text
    code, text, err = cli(["validate", "--served-benchmarks", str(path)])
    assert code == 0, err
    assert "client model: perturbed (every user at once, each request's lengths within 0.5%" in text


def test_rows_the_server_queued_are_set_apart_and_said_so(tmp_path):
    # 40 s to a first token against 127 x 20 ms = 2.5 s of reply: most users waited in a queue
    queued = line(c=512, osl=128, ttft="40000", tpot="20")
    ok = line(c=8, osl=128, ttft="2400", tpot="20")  # just under one reply's generation: kept
    rows = read_benchmarks(table(tmp_path, queued, ok))
    assert [r.queued_by_server for r in rows] == [True, False]
    kept, apart = in_regime(rows)
    assert kept == [rows[1]] and apart == [rows[0]]
    code, text, err = cli(["validate", "--served-benchmarks", str(table(tmp_path, queued, ok, name="b.csv"))])
    assert code == 0, err
    assert "1 configurations set apart" in text and "qwen3-32b at 512 users" in text


def test_validate_refuses_served_benchmark_options_without_a_table(tmp_path):
    for flag in (["--client", "staggered"], ["--rows"], ["--served-engine", "none"], ["--held-out"]):
        code, _, err = cli(["validate", *flag, "--real", str(tmp_path)])
        one_line_error(code, err, f"{flag[0]} applies with --served-benchmarks")
