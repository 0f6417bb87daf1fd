"""A benchmark row's prefill floor (calibration/served_bench/floor.py): a lower bound of what
the served engine's own price gives for the same prefills, growing with the stated work;
`validate --served-benchmarks` names the rows that ran faster than it and judges without
them beside the whole."""
from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.calibration.served_bench.floor import allreduce_seconds_a_token, gemm_seconds_a_token, prefill_floor
from batchlab.calibration.served_bench.read import BenchmarkRow
from batchlab.core.features import features_of
from batchlab.core.model.hardware import HARDWARE
from batchlab.core.model.presets import lookup_model
from batchlab.experiments.setup import sim_setup
from batchlab.experiments.setup.dtypes import served_model
from batchlab.experiments.validation.served_benchmarks import config_for
from tests.helpers import cli
from tests.test_served_bench import line, table

CASES = [("llama-3.1-8b", "h200", "fp8"), ("qwen3-32b", "h100-sxm", None), ("gpt-oss-120b", "h100-sxm", None)]


def _row(model: str, gpu: str, dtype: str | None, tp: int, users: int = 8, isl: int = 1024, osl: int = 128,
         ttft: float = 0.1, tpot: float = 0.02) -> BenchmarkRow:
    return BenchmarkRow(1, model, model, gpu, dtype, dtype or "", tp, users, isl, osl, ttft, tpot, "0.12.0")


def _setup(row: BenchmarkRow):
    cfg = config_for(row)
    return sim_setup(cfg).cost, served_model(cfg, lookup_model(cfg.model.name))[0]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(CASES), st.sampled_from([1, 2, 4, 8]), st.integers(512, 8192))
def test_the_floor_is_below_the_served_price_of_the_same_prefill(case, tp, tokens):
    row = _row(*case, tp=tp)
    cost, model = _setup(row)
    a_token = gemm_seconds_a_token(model, HARDWARE[row.gpu], tp) + allreduce_seconds_a_token(
        model, cost.graph.allreduce, tp)
    prefill = features_of(1, 1, tokens, 0, 0, 0, 0, 0, 0, 0, 0, tokens * (tokens + 1) // 2, tokens)
    assert 0 < tokens * a_token < cost.step_time(prefill)
    assert (allreduce_seconds_a_token(model, cost.graph.allreduce, tp) == 0) == (tp == 1)


def test_the_floor_is_the_stated_prompts_work_and_the_cycle_the_measured_one():
    row = _row("qwen3-32b", "h100-sxm", None, 4, users=8, isl=1024, osl=128, ttft=0.1, tpot=0.02)
    cost, model = _setup(row)
    f = prefill_floor(row, model, HARDWARE[row.gpu], cost.graph.allreduce)
    assert f.cycle_s == pytest.approx(0.1 + 127 * 0.02)
    twice = prefill_floor(dataclasses.replace(row, concurrency=16), model, HARDWARE[row.gpu], cost.graph.allreduce)
    longer = prefill_floor(dataclasses.replace(row, isl=3072), model, HARDWARE[row.gpu], cost.graph.allreduce)
    assert twice.floor_s == pytest.approx(2 * f.floor_s) and longer.floor_s == pytest.approx(3 * f.floor_s)
    assert not f.below
    fast = dataclasses.replace(row, ttft_s=0.001, tpot_s=f.floor_s / 200)  # a cycle shorter than its prefills
    assert prefill_floor(fast, model, HARDWARE[row.gpu], cost.graph.allreduce).below


def test_validate_names_the_rows_that_ran_less_than_they_state(tmp_path):
    # 128 users of 8192-token prompts, their replies' cycle 0.2 s: no H100 pair prefills 1M tokens in it
    fast = line(c=128, tp=2, isl=8192, osl=4, ttft="50", tpot="50")
    path = table(tmp_path, line(c=4, osl=32), fast)
    code, text, err = cli(["validate", "--served-benchmarks", str(path)])
    assert code == 0, err
    assert "1 configurations ran a user's cycle" in text and "qwen3-32b on 2 x h100-sxm, 128 users, 8192/4" in text
    assert "all but those" in text
    code, text, err = cli(["validate", "--served-benchmarks", str(table(tmp_path, line(c=4, osl=32), name="b.csv"))])
    assert code == 0 and "ran a user's cycle" not in text and "all but those" not in text
    assert "1 groups one-sided by their rows, whatever the price: qwen3-32b, h100-sxm, TP 2 (one row)" in text
    code, out, err = cli(["validate", "--served-benchmarks", str(tmp_path / "b.csv"), "--format", "json"])
    assert code == 0 and json.loads(out)["one_sided_whatever_the_price"] == [
        {"group": ["qwen3-32b", "h100-sxm", 2], "why": "one row"}]


def test_calibrate_from_served_names_the_rows_it_fits_that_ran_less(tmp_path):
    from tests.test_served_fit import ROWS
    fast = line(c=64, tp=2, isl=8192, osl=4, ttft="50", tpot="50")
    code, text, err = cli(["calibrate", "--from-served", str(table(tmp_path, *ROWS, fast)), "--leave-out", "none",
                           "--out", str(tmp_path / "s.json")])
    assert code == 0, err
    assert "configurations ran a user's cycle" in text and "fitted all the same" in text
    assert "64 users, 8192/4" in text  # (and the fixture's 32 users of 512 tokens at 15 ms: fast as well)
