"""The noise floor of a validation: the statistics on known inputs, the machine's speed
measured from a run's steady decode steps, the stable/overloaded label on every run, and
`batchlab validate --repeats N` end to end on a tiny workload."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.experiments.machine_speed import machine_speed, steady_decode
from batchlab.core.workload import Workload
from batchlab.experiments.validation.judge import Judge
from batchlab.experiments.validation.pair import run_sim
from batchlab.experiments.validation.records import ProfileInfo
from batchlab.experiments.validation.sources import RealSide, live_run
from batchlab.experiments.validation.stat_tests import inside, ks, spread, tost
from batchlab.experiments.validation.verdicts import beyond_range, verdict
from tests.helpers import SMALL_RUN, SMALL_VALIDATE, cli

COST = LinearCostModel(0.004, {"decode_tokens": 2e-4, "prefill_tokens": 5e-5})
SCHED = SchedulerConfig(policy="continuous", max_num_seqs=8, block_size=8, num_kv_blocks=4000)
INFO = ProfileInfo(source="test", describe="a linear test model", created="", heldout_median_ape_pct=None)


def test_ks_on_known_samples():
    same = ks(np.arange(1, 51), np.arange(1, 51))
    assert same.statistic == 0 and same.same
    # [1..4] vs [3..6]: at 2 the CDFs stand at 1/2 and 0
    assert ks(np.array([1, 2, 3, 4.]), np.array([3, 4, 5, 6.])).statistic == pytest.approx(0.5)
    apart = ks(np.arange(1, 51), np.arange(101, 151))
    assert apart.statistic == 1 and apart.p < 1e-10 and apart.same is False
    assert ks(np.array([]), np.arange(3)).same is None


def test_tost_on_known_samples():
    rng = np.random.default_rng(0)
    b = rng.lognormal(3, 0.3, 400)
    near = tost(b * 1.02, b)
    assert near.ratio == pytest.approx(1.02) and near.equivalent and near.p < 0.05
    far = tost(b * 1.3, b)
    assert far.ratio == pytest.approx(1.3) and not far.equivalent and far.p > 0.5
    # within the margin but too few, too noisy samples: equivalence is not shown
    few = tost(rng.lognormal(3, 1.0, 5), rng.lognormal(3, 1.0, 5))
    assert few.equivalent is False
    # no spread at all: the ratio decides
    assert tost(np.full(4, 105.0), np.full(4, 100.0)).equivalent
    assert not tost(np.full(4, 120.0), np.full(4, 100.0)).equivalent


def test_spread_and_inside_on_known_values():
    s = spread([100.0, 110.0, 90.0, math.nan])
    assert (s.min, s.max, s.median, s.n) == (90, 110, 100, 3)
    assert s.range == pytest.approx(0.2)
    # pairs: |100-110|/110, |100-90|/90, |110-90|/90
    assert s.pairwise_median == pytest.approx(10 / 90)
    assert inside(95, s) and not inside(111, s) and inside(math.nan, s) is None


def test_verdicts():
    tight, wide = spread([98.0, 100.0]), spread([90.0, 102.0])  # ranges 2%, 12.4%
    assert verdict(0.03, 0.05, tight, 103.0, False) == "ok"
    assert verdict(0.08, 0.05, tight, 108.0, False) == "miss"
    assert verdict(0.01, 0.05, wide, 97.0, False) == "undecidable"  # inside a range wider than the target
    assert verdict(0.01, 0.05, wide, 97.0, True) == "overloaded"
    assert verdict(0.5, None, tight, 150.0, False) == ""
    assert verdict(math.nan, 0.05, spread([]), 1.0, False) == ""  # no real value to judge against


def test_a_simulation_far_outside_a_wide_spread_is_a_miss():
    # the cases: TPOT +198% against a 14% spread; TTFT p90 626 ms against 434-519 ms
    assert verdict(1.98, 0.05, spread([93.0, 100.0, 107.0]), 298.0, False) == "miss"
    ttft = spread([434.0, 470.0, 519.0])
    assert ttft.range > 0.05 and verdict(0.33, 0.05, ttft, 626.0, False) == "miss"
    # just outside the range (by less than the target): judged on its error as usual
    assert verdict(0.12, 0.05, ttft, 530.0, False) == "miss"
    assert verdict(0.04, 0.05, ttft, 530.0, False) == "ok"


@given(values=st.lists(st.floats(1, 1000), min_size=2, max_size=6), sim=st.floats(1, 2000),
       target=st.sampled_from([0.05, 0.10]))
def test_undecidable_only_inside_a_spread_wider_than_the_target(values, sim, target):
    sp = spread(values)
    err = float(np.median([(sim - v) / v for v in values]))
    v = verdict(err, target, sp, sim, False)
    if v == "undecidable":
        assert sp.range > target and sp.min <= sim <= sp.max
    if beyond_range(sim, sp) > target:
        assert v == "miss"
    assert v in ("ok", "miss", "undecidable")


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


def judge_runs(w: Workload, cost: LinearCostModel, *runs):
    """Simulated runs of `w` standing in for live real runs, judged with `cost`."""
    return Judge(cost, None, INFO).cell(RealSide("here", w, SCHED, [live_run(r, "here") for r in runs])).cell


def test_an_overloaded_run_is_labelled_and_its_latencies_are_not_judged():
    light = run_sim(bursty(200, 5.0), SCHED, COST)
    heavy = run_sim(bursty(200, 400.0), SCHED, COST)
    ok = judge_runs(bursty(200, 5.0), COST, light)
    assert ok.stability.real == ["stable"] and ok.stability.sim == "stable"
    c = judge_runs(bursty(200, 400.0), LinearCostModel(0.006, COST.coef), heavy)  # a slower profile
    assert c.stability.real == ["overloaded"] and c.stability.sim == "overloaded"
    lat = [m for m in c.metrics if m.key.endswith("_ms")]
    assert all(m.overloaded and m.verdict in ("overloaded", "") for m in lat)
    assert all(m.verdict == "overloaded" for m in lat if m.target is not None)
    assert [m.label for m in c.metrics if m.verdict == "miss"] == ["requests/s", "output tokens/s", "total tokens/s"]
    assert c.totals.verdicts.overloaded == 12 and c.totals.judged == 3  # throughput alone is judged
    assert heavy.result.meta.stability.verdict == "overloaded"


def test_repeats_judged_on_simulated_runs():
    """Three 'real' runs (the simulator at three machine speeds) judged with the profile of
    the middle one: every metric has its spread, range check and verdicts, every latency
    distribution its tests, and each run its speed."""
    w = bursty(60, 4.0)
    reals = [run_sim(w, SCHED, LinearCostModel(COST.intercept * k, {n: c * k for n, c in COST.coef.items()}))
             for k in (0.97, 1.0, 1.03)]
    c = judge_runs(w, COST, *reals)
    mean_ttft = c.row("mean_ttft_ms")
    assert mean_ttft.sim_inside and mean_ttft.spread.n == 3
    assert 0 < mean_ttft.spread.range < 0.1 and abs(mean_ttft.error) < 0.01
    # each run's speed normalised out: the simulation at 0.97x and 1.03x is each run again
    assert abs(mean_ttft.error_normalised) < 1e-6
    assert [s.factor for s in c.machine_speed] == pytest.approx([0.97, 1.0, 1.03])
    d = c.diagnostics
    assert {t.stem for t in d.distributions} == {"ttft", "tpot", "itl", "e2el"}
    assert all(len(t.real_vs_real_ks) == 3 for t in d.distributions)
    assert c.stability.real == ["stable"] * 3 and c.stability.sim == "stable"
    assert sum(c.totals.verdicts.as_dict().values()) == len([m for m in c.metrics if m.target is not None])


@pytest.mark.backend
def test_repeats_zero_is_a_one_line_error():
    for bad in ("0", "-2"):
        code, _, err = cli(["validate", *SMALL_VALIDATE, "--profile", "default", "--repeats", bad])
        assert code == 2 and "--repeats must be" in err and err.strip().count("\n") == 0


@pytest.mark.backend
def test_validate_repeats_end_to_end(profile_file, tmp_path):
    code, text, err = cli(["validate", *SMALL_VALIDATE, "--profile", str(profile_file), "--repeats", "2",
                           "--out", str(tmp_path)])
    assert code == 0, err
    assert "TOST" in text and "KS D" in text and "real-real" in text
    assert ("cannot decide" in text) or ("every judged number is decidable" in text)
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("[continuous]"))
    # The heading wraps at 120 columns, where the run folder's path (pytest's numbered tmp
    # folder: its length varies) puts it: read it with its next line joined on.
    heading = " ".join(s.strip() for s in lines[at:at + 2])
    assert ": 2 real run(s) (" in heading and ("(stable," in heading or "(overloaded," in heading)
    assert max(len(line) for line in text.splitlines()) <= 120
    cell = json.loads((tmp_path / "comparison.json").read_text())["cells"][0]
    assert cell["policy"] == "continuous" and cell["runs"] == 2 and len(cell["machine_speed"]) == 2
    assert all(s["factor"] is not None and 0.2 < s["factor"] < 5 for s in cell["machine_speed"])
    m = next(m for m in cell["metrics"] if m["key"] == "median_e2el_ms")
    assert len(m["real"]) == 2 and m["sim_inside"] in (True, False)
    assert math.isfinite(m["error"]) and math.isfinite(m["error_normalised"])
    dists = cell["diagnostics"]["distributions"]
    assert {d["metric"] for d in dists} == {"TTFT", "TPOT", "ITL", "E2E latency"}
    for d in dists:
        assert 0 <= d["ks"]["p"] <= 1 and d["tost"]["equivalent"] in (True, False)
    for folder in ("real", "real_2", "sim", "sim_normalised", "sim_normalised_2"):
        meta = json.loads((tmp_path / "continuous" / folder / "meta.json").read_text())
        summary = json.loads((tmp_path / "continuous" / folder / "summary.json").read_text())
        assert meta["stability"]["verdict"] == summary["stability"] in ("stable", "overloaded")
    real_meta = json.loads((tmp_path / "continuous" / "real_2" / "meta.json").read_text())
    assert real_meta["machine_speed"]["factor"] == cell["machine_speed"][1]["factor"]
    assert (tmp_path / "continuous" / "cdf_band.png").stat().st_size > 0


@pytest.mark.backend
def test_batchlab_run_records_speed_and_stability(profile_file, tmp_path):
    code, text, err = cli(["run", *SMALL_RUN, "--profile", str(profile_file), "--out", str(tmp_path)])
    assert code == 0, err
    meta = json.loads((tmp_path / "meta.json").read_text())["continuous"]
    assert meta["machine_speed"]["factor"] > 0 and meta["machine_speed"]["steps"] > 0
    summary = json.loads((tmp_path / "summary.json").read_text())["continuous"]
    assert summary["stability"] == meta["stability"]["verdict"] == "stable"
    assert "machine speed: continuous: steady decode steps" in text
    code, text, _ = cli(["run", *SMALL_RUN, "--format", "json"])
    assert code == 0 and json.loads(text)["continuous"]["stability"] == "stable"


@pytest.mark.backend
def test_batchlab_run_without_profile_uses_the_shipped_profile_of_its_setup(tmp_path):
    """batchlab-tiny on cpu with 1 thread has a shipped profile: the run prices its
    steady decode steps with it, and says which profile it used."""
    code, text, err = cli(["run", *SMALL_RUN, "--max-output-len", "24", "--out", str(tmp_path)])
    assert code == 0, err
    speed = json.loads((tmp_path / "meta.json").read_text())["continuous"]["machine_speed"]
    assert speed["profile"].startswith("shipped batchlab-tiny-cpu")
    # The shipped profile was made on another machine: where this one runs more than twice
    # as slow (a loaded CI machine), every step is over the contention bound, and the run
    # says so instead of a factor. Either way it names the profile that priced the steps.
    if speed["factor"] is None:
        assert "contended" in speed["why"] and "continuous: not measured (" in text
    else:
        assert speed["factor"] > 0 and speed["steps"] > 0
        assert "x the price of shipped batchlab-tiny-cpu" in text


@pytest.mark.backend
def test_batchlab_run_with_no_profile_of_its_setup_records_a_reference_probe(tmp_path):
    """Two threads: no shipped profile describes the setup, so the factor stays null
    and the reference probe's figures, timed before and after the run, are recorded."""
    code, text, err = cli(["run", *SMALL_RUN, "--threads", "2", "--out", str(tmp_path)])
    assert code == 0, err
    speed = json.loads((tmp_path / "meta.json").read_text())["continuous"]["machine_speed"]
    assert speed["factor"] is None and "reference probe" in speed["method"]
    for when in ("before", "after"):
        assert speed["probe"][when]["read_bandwidth"] > 1e8 and speed["probe"][when]["matmul_flops"] > 1e8
    assert "reference probe read" in text


def test_the_band_plot_heads_each_panel_with_the_tables_verdicts():
    from batchlab.experiments.validation.output import figures

    w = bursty(120, 5.0)
    runs = [run_sim(w, SCHED, LinearCostModel(0.004 * k, COST.coef)) for k in (1.0, 1.02)]
    judged = Judge(LinearCostModel(0.012, COST.coef), None, INFO).cell(
        RealSide("here", w, SCHED, [live_run(r, "here") for r in runs]))
    band = next(f for f in figures(judged) if f.filename.endswith("cdf_band.png"))
    titles = {p.xlabel.split(" (")[0]: p.title for p in band.panels}
    for m in judged.cell.metrics:
        if m.verdict and m.metric in titles:
            assert f"{m.stat} {m.verdict}" in titles[m.metric]
    assert "miss" in titles["TTFT"]  # a profile 3x slow misses beyond the real range
    row = judged.cell.row("median_ttft_ms")
    assert row.verdict == "miss" and not row.sim_inside
    from batchlab.experiments.validation.render import render_cell

    text = render_cell(judged.cell).replace("\n    ", " ")
    assert "missed whatever the real runs' spread" in text and "TTFT p50 (" in text
