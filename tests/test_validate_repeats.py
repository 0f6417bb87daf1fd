"""The noise floor of a validation: the statistics on known inputs, the machine's speed
measured from a run's steady decode steps, the stable/overloaded label on every run, and
`batchlab validate --repeats N` end to end on a tiny workload."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost import LinearCostModel
from batchlab.core.run_meta import MachineSpeed
from batchlab.experiments.machine_speed import machine_speed, steady_decode
from batchlab.core.workload import Workload
from batchlab.experiments.validation import compare, repeats
from batchlab.experiments.validation.pair import run_sim
from batchlab.experiments.validation.stat_tests import inside, ks, spread, tost
from batchlab.experiments.validation.validate import compare_runs

COST = LinearCostModel(0.004, {"decode_tokens": 2e-4, "prefill_tokens": 5e-5})
SCHED = SchedulerConfig(policy="continuous", max_num_seqs=8, block_size=8, num_kv_blocks=4000)


def test_ks_on_known_samples():
    same = ks(np.arange(1, 51), np.arange(1, 51))
    assert same["statistic"] == 0 and same["same"]
    # [1..4] vs [3..6]: at 2 the CDFs stand at 1/2 and 0
    assert ks(np.array([1, 2, 3, 4.]), np.array([3, 4, 5, 6.]))["statistic"] == pytest.approx(0.5)
    apart = ks(np.arange(1, 51), np.arange(101, 151))
    assert apart["statistic"] == 1 and apart["p"] < 1e-10 and apart["same"] is False
    assert ks(np.array([]), np.arange(3))["same"] is None


def test_tost_on_known_samples():
    rng = np.random.default_rng(0)
    b = rng.lognormal(3, 0.3, 400)
    near = tost(b * 1.02, b)
    assert near["ratio"] == pytest.approx(1.02) and near["equivalent"] and near["p"] < 0.05
    far = tost(b * 1.3, b)
    assert far["ratio"] == pytest.approx(1.3) and not far["equivalent"] and far["p"] > 0.5
    # within the margin but too few, too noisy samples: equivalence is not shown
    few = tost(rng.lognormal(3, 1.0, 5), rng.lognormal(3, 1.0, 5))
    assert few["equivalent"] is False
    # no spread at all: the ratio decides
    assert tost(np.full(4, 105.0), np.full(4, 100.0))["equivalent"]
    assert not tost(np.full(4, 120.0), np.full(4, 100.0))["equivalent"]


def test_spread_and_inside_on_known_values():
    s = spread([100.0, 110.0, 90.0, math.nan])
    assert (s["min"], s["max"], s["median"], s["n"]) == (90, 110, 100, 3)
    assert s["range"] == pytest.approx(0.2)
    # pairs: |100-110|/110, |100-90|/90, |110-90|/90
    assert s["pairwise_median"] == pytest.approx(10 / 90)
    assert inside(95, s) and not inside(111, s) and inside(math.nan, s) is None


def test_verdicts():
    assert repeats.verdict(0.03, 0.05, 0.02, False) == "ok"
    assert repeats.verdict(0.08, 0.05, 0.02, False) == "miss"
    assert repeats.verdict(0.01, 0.05, 0.12, False) == "undecidable"
    assert repeats.verdict(0.01, 0.05, 0.0, True) == "overloaded"
    assert repeats.verdict(0.5, None, 0.0, False) == ""


def step_table(kinds: list[str], slow: float) -> dict[str, np.ndarray]:
    """Steps back to back except 'idle' (a 10 ms gap before it); 'prefill' steps carry
    prompt tokens. Every decode step lasts `slow` x its price, other steps 3 x."""
    n = len(kinds)
    t = {"num_seqs": np.full(n, 4), "num_prefill_seqs": np.zeros(n, int),
         "prefill_tokens": np.array([64 if k == "prefill" else 0 for k in kinds]),
         "decode_tokens": np.full(n, 4), "kv_tokens_read": np.full(n, 400),
         "attention_pairs": np.full(n, 400), "num_preempted": np.zeros(n, int)}
    price = COST.intercept + 2e-4 * t["decode_tokens"] + 5e-5 * t["prefill_tokens"]
    after_prefill = np.concatenate(([True], t["prefill_tokens"][:-1] > 0))
    steady = (t["prefill_tokens"] == 0) & ~after_prefill & (np.array(kinds) != "idle")
    t["duration_s"] = price * np.where(steady, slow, 3.0)
    start, now = [], 0.0
    for k, d in zip(kinds, t["duration_s"]):
        now += 0.010 if k == "idle" else 0.0
        start.append(now)
        now += d
    t["start_s"] = np.array(start)
    return t


def test_machine_speed_uses_steady_decode_steps_only():
    kinds = ["prefill", "decode", *["decode"] * 10, "idle", "decode", "prefill", "decode",
             *["decode"] * 5]
    t = step_table(kinds, slow=1.25)
    mask = steady_decode(t)
    # not the prefills, not the step right after one, not the one after an idle gap
    assert mask.sum() == 10 + 1 + 5 and not mask[[0, 1, 12, 14, 15]].any()
    ms = machine_speed(t, COST, "test profile")
    assert ms.factor == pytest.approx(1.25) and ms.steps == 16 and ms.spread == 0
    assert machine_speed(t, None).factor is None and "no profile" in machine_speed(t, None).why


def bursty(n: int, rate: float) -> Workload:
    rng = np.random.default_rng(1)
    return Workload(np.cumsum(rng.exponential(1 / rate, n)), rng.integers(20, 200, n),
                    rng.integers(5, 60, n), description=[f"{n} requests at {rate:g}/s"])


def test_an_overloaded_run_is_labelled_and_its_latencies_are_not_judged():
    light = run_sim(bursty(200, 5.0), SCHED, COST)
    heavy = run_sim(bursty(200, 400.0), SCHED, COST)
    slower = run_sim(bursty(200, 400.0), SCHED, LinearCostModel(0.006, COST.coef))
    ok = compare_runs(light, light, COST)
    assert ok["stability"] == {"real": "stable", "sim": "stable"}
    comp = compare_runs(heavy, slower, COST)
    assert comp["stability"] == {"real": "overloaded", "sim": "overloaded"}
    lat = [m for m in comp["metrics"] if m["key"].endswith("_ms")]
    assert all(m["overloaded"] and m["ok"] is None for m in lat)
    assert comp["misses"] == [f"{c} value" for c in ("requests/s", "output tokens/s", "total tokens/s")]
    assert heavy.result.meta.stability.verdict == "overloaded"


def test_repeats_analysis_of_simulated_runs():
    """Three 'real' runs (the simulator at three machine speeds) and a simulation that
    falls inside their range: every metric has its spread, range check and verdict."""
    w = bursty(60, 4.0)
    reals = [run_sim(w, SCHED, LinearCostModel(COST.intercept * k, {n: c * k for n, c in COST.coef.items()}))
             for k in (0.97, 1.0, 1.03)]
    for r in reals:
        r.result.meta.machine_speed = MachineSpeed(factor=1.0)
    rep = repeats.analyse(reals, reals[1], [reals[1]] * 3)
    mean_ttft = next(m for m in rep["metrics"] if m["key"] == "mean_ttft_ms")
    assert mean_ttft["sim_inside"] and mean_ttft["spread"]["n"] == 3
    assert 0 < mean_ttft["spread"]["range"] < 0.1 and abs(mean_ttft["error"]) < 0.01
    assert {d["stem"] for d in rep["distributions"]} == {"ttft", "tpot", "itl", "e2el"}
    assert all(len(d["real_vs_real_ks"]) == 3 for d in rep["distributions"])
    assert rep["stability"] == {"real": ["stable"] * 3, "sim": "stable"}
    assert sum(rep["counts"].values()) == len([m for m in rep["metrics"] if m["target"] is not None])


torch = pytest.importorskip("torch")
from tests.test_validate_cli import SMALL, cli, profile_file  # noqa: E402,F401  (the fixture)


def test_repeats_zero_is_a_one_line_error():
    for bad in ("0", "-2"):
        code, _, err = cli(["validate", *SMALL, "--profile", "default", "--repeats", bad])
        assert code == 2 and "--repeats must be" in err and err.strip().count("\n") == 0


def test_validate_repeats_end_to_end(profile_file, tmp_path):  # noqa: F811
    code, text, err = cli(["validate", *SMALL, "--profile", str(profile_file), "--repeats", "2",
                           "--out", str(tmp_path)])
    assert code == 0, err
    assert "noise floor over 2 real runs" in text and "TOST" in text and "KS D" in text
    assert ("cannot decide" in text) or ("every judged number is decidable" in text)
    assert "real run stable" in text.splitlines()[0] or "real run overloaded" in text.splitlines()[0]
    comp = json.loads((tmp_path / "comparison.json").read_text())["continuous"]
    rep = comp["repeats"]
    assert rep["runs"] == 2 and len(rep["machine_speed"]) == 2
    assert all(k is not None and 0.2 < k < 5 for k in rep["machine_speed"])
    m = next(m for m in rep["metrics"] if m["key"] == "median_e2el_ms")
    assert len(m["real"]) == 2 and m["sim_inside"] in (True, False)
    assert math.isfinite(m["error"]) and math.isfinite(m["error_normalised"])
    assert {d["metric"] for d in rep["distributions"]} == {"TTFT", "TPOT", "ITL", "E2E latency"}
    for d in rep["distributions"]:
        assert 0 <= d["ks"]["p"] <= 1 and d["tost"]["equivalent"] in (True, False)
    for folder in ("real", "real_2", "sim", "sim_normalised", "sim_normalised_2"):
        meta = json.loads((tmp_path / "continuous" / folder / "meta.json").read_text())
        summary = json.loads((tmp_path / "continuous" / folder / "summary.json").read_text())
        assert meta["stability"]["verdict"] == summary["stability"] in ("stable", "overloaded")
    real_meta = json.loads((tmp_path / "continuous" / "real_2" / "meta.json").read_text())
    assert real_meta["machine_speed"]["factor"] == rep["machine_speed"][1]
    assert (tmp_path / "continuous" / "cdf_band.png").stat().st_size > 0


def test_batchlab_run_records_speed_and_stability(profile_file, tmp_path):  # noqa: F811
    from tests.test_backend_cli import SMALL as RUN_SMALL
    code, text, err = cli(["run", *RUN_SMALL, "--profile", str(profile_file), "--out", str(tmp_path)])
    assert code == 0, err
    meta = json.loads((tmp_path / "meta.json").read_text())["continuous"]
    assert meta["machine_speed"]["factor"] > 0 and meta["machine_speed"]["steps"] > 0
    summary = json.loads((tmp_path / "summary.json").read_text())["continuous"]
    assert summary["stability"] == meta["stability"]["verdict"] == "stable"
    assert "machine speed: continuous: steady decode steps" in text
    code, text, _ = cli(["run", *RUN_SMALL, "--format", "json"])
    assert code == 0 and json.loads(text)["continuous"]["stability"] == "stable"


def test_batchlab_run_without_profile_uses_the_shipped_profile_of_its_setup(tmp_path):
    """batchlab-tiny on cpu with 1 thread has a shipped profile: the run prices its
    steady decode steps with it, and says which profile it used."""
    from tests.test_backend_cli import SMALL as RUN_SMALL
    code, text, err = cli(["run", *RUN_SMALL, "--max-output-len", "24", "--out", str(tmp_path)])
    assert code == 0, err
    speed = json.loads((tmp_path / "meta.json").read_text())["continuous"]["machine_speed"]
    assert speed["factor"] > 0 and speed["steps"] > 0
    assert speed["profile"].startswith("shipped batchlab-tiny-cpu")
    assert "x the price of shipped batchlab-tiny-cpu" in text


def test_batchlab_run_with_no_profile_of_its_setup_records_a_reference_probe(tmp_path):
    """Two threads: no shipped profile describes the setup, so the factor stays null
    and the reference probe's figures, timed before and after the run, are recorded."""
    from tests.test_backend_cli import SMALL as RUN_SMALL
    code, text, err = cli(["run", *RUN_SMALL, "--threads", "2", "--out", str(tmp_path)])
    assert code == 0, err
    speed = json.loads((tmp_path / "meta.json").read_text())["continuous"]["machine_speed"]
    assert speed["factor"] is None and "reference probe" in speed["method"]
    for when in ("before", "after"):
        assert speed["probe"][when]["read_bandwidth"] > 1e8 and speed["probe"][when]["matmul_flops"] > 1e8
    assert "reference probe read" in text
