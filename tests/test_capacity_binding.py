"""Every capacity answer names what binds it, with its headroom, and how the
next-cheaper option missed."""
from __future__ import annotations

import json
import math

import pytest

from batchlab.core.summary import SLO
from batchlab.experiments.capacity.binding import binding, constraints
from batchlab.experiments.capacity.point import Criteria
from batchlab.experiments.cli import main

CRIT = Criteria(SLO(ttft_ms=1000, tpot_ms=60))


def point(ttft, tpot, kv=0.05, seats=0.1, preemptions=0, stability="stable", **more):
    return {"p99_ttft_ms": ttft, "p99_tpot_ms": tpot, "kv_utilization": kv, "slot_utilization": seats,
            "preemptions": preemptions, "stability": stability, "rejected": 0, "unfinished": 0, **more}


def test_headrooms_are_relative_to_each_limit():
    c = {x.name: x for x in constraints(point(500, 45), CRIT)}
    assert c["p99 TTFT"].headroom == pytest.approx(0.5) and c["p99 TPOT"].headroom == pytest.approx(0.25)
    assert c["KV memory"].headroom == pytest.approx(0.95) and c["seats"].headroom == pytest.approx(0.9)


def test_the_tightest_slo_binds_and_the_next_cheaper_miss_is_measured():
    b = binding(point(500, 45), point(900, 72), CRIT, "3 replica(s)")
    assert b.constraint == "p99 TPOT" and b.headroom == pytest.approx(0.25)
    assert b.next_miss == pytest.approx(0.2) and "p99 TPOT 72.0 ms of 60" in b.next_failure
    assert "the next cheaper, 3 replica(s), fails" in b.text()


def test_the_next_cheapers_failure_names_the_constraint_even_when_another_is_tighter():
    # TPOT is the tighter at the answer, but one replica fewer misses on TTFT
    b = binding(point(800, 58), point(1300, 59), CRIT, "1 replica(s)")
    assert b.constraint == "p99 TTFT" and b.headroom == pytest.approx(0.2) and b.next_miss == pytest.approx(0.3)
    # what to watch (the least headroom at the answer) comes first, beside what binds
    assert b.tightest == "p99 TPOT" and b.tightest_headroom == pytest.approx(2 / 60)
    assert b.text().startswith("tightest at the answer: p99 TPOT 58.0 ms of 60 (+3% headroom); binds: p99 TTFT "
                               "(+20% headroom here; what the next cheaper fails on); p99 TTFT 800.0 ms of 1000; "
                               "KV cache")
    assert b.text().endswith("the next cheaper, 1 replica(s), fails: p99 TTFT 1300.0 ms of 1000 (missed by 30%)")


def test_when_the_tightest_is_what_the_next_cheaper_fails_on_it_is_said_once():
    b = binding(point(500, 57), point(900, 72), CRIT, "3 replica(s)")
    assert b.tightest == b.constraint == "p99 TPOT"
    assert b.text().startswith("tightest at the answer: p99 TPOT 57.0 ms of 60 (+5% headroom); binds: p99 TPOT "
                               "too (what the next cheaper fails on); KV cache")


def test_a_queue_that_grows_is_throughput_or_the_memory_it_ran_out_of():
    assert binding(point(500, 45), point(400, 40, stability="overloaded"), CRIT, "x").constraint == "throughput"
    kv = binding(point(500, 45), point(400, 40, stability="overloaded", preemptions=12), CRIT, "x")
    assert kv.constraint == "KV memory" and "KV memory runs out" in kv.next_failure and math.isnan(kv.next_miss)
    seats = binding(point(500, 45), point(400, 40, stability="overloaded", seats=0.97), CRIT, "x")
    assert seats.constraint == "seats"


def test_no_cheaper_option_says_so():
    b = binding(point(500, 45), None, CRIT)
    assert b.constraint == "p99 TPOT" and "no cheaper option" in b.text()


def test_the_replicas_answer_prints_and_writes_what_binds(capsys):
    args = ["capacity", "replicas", "--workload", "chat", "--num-requests", "300", "--rate", "40",
            "--policy", "chunked", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "60", "--workers", "1"]
    assert main([*args, "--format", "json"]) == 0
    r = json.loads(capsys.readouterr().out)
    a = r["answers"][0]
    n = a["answer"]
    assert a["binds"] in ("p99 TTFT", "p99 TPOT") and a["binds_headroom"] > 0
    fewer = next(p for p in r["points"][a["label"]] if p["replicas"] == n - 1)
    key = "p99_ttft_ms" if a["binds"] == "p99 TTFT" else "p99_tpot_ms"
    limit = 1000 if key == "p99_ttft_ms" else 60
    assert a["next_miss"] == pytest.approx(fewer[key] / limit - 1)
    assert a["next_cheaper"].startswith(f"{n - 1} replica(s)")
    assert main(args) == 0
    assert f"binds: {a['binds']}" in capsys.readouterr().out


def test_the_max_rate_answer_compares_with_the_next_rate_up(capsys):
    assert main(["capacity", "max-rate", "--workload", "chat", "--num-requests", "300", "--rate", "10",
                 "--policy", "chunked", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "60", "--workers", "1",
                 "--format", "json"]) == 0
    a = json.loads(capsys.readouterr().out)["answers"][0]
    assert a["next_cheaper"] == f"{a['band_high']:.2f} req/s" and a["next_miss"] > 0
    assert a["binds"] in ("p99 TTFT", "p99 TPOT", "throughput", "KV memory", "seats")
