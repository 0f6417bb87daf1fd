"""calibrate --from-replay writes the better of the fit and the prior on the held-out
requests, and says in one line when the fit did worse and when the fitted and judged parts
ran in different load regimes (calibration/from_replay/verdict.py). The replays are
simulated (no server, no wall clock): deterministic on any machine."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.calibration.from_replay.judge import Errors
from batchlab.calibration.from_replay.predict import Case, predict
from batchlab.calibration.from_replay.space import fitted_form_space
from batchlab.calibration.from_replay.verdict import (REGIME_GAP, WRITTEN_FIT, WRITTEN_PRIOR, Regime, decide,
                                                      in_flight_profile, regime)
from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.profile import load_profile
from batchlab.core.workload.workload import Workload
from tests.serve_helpers import batchlab

SEATS = 16
ENGINE = ("--max-num-seqs", str(SEATS), "--num-kv-blocks", "2000")
# The server's one-row GEMMs run this much slower than the prior's form says (small GEMM
# kernels off the roofline): a batch-1 decode ~3x the prior's, a batch above the form's
# small-row corrections exactly the prior's. The fit holds small_rows at the prior, so from
# a light replay (batch 1 throughout) it can only raise the fixed step cost, which every
# step of a saturated replay then pays.
SLOW_ONE_ROW_S = 0.008


def _write(path, w: Workload, ttft: np.ndarray, tpot: np.ndarray) -> None:
    out = w.output_len.tolist()
    path.write_text(json.dumps({
        "model_id": "batchlab-tiny", "backend": "vllm", "input_lens": w.prompt_len.tolist(), "output_lens": out,
        "ttfts": ttft.tolist(), "itls": [[float(g)] * (o - 1) for g, o in zip(tpot, out)],
        "start_times": w.arrival.tolist(), "errors": [""] * len(out)}))


@pytest.fixture(scope="module")
def light_then_saturated(tmp_path_factory):
    """light.json (0.5 req/s: one request at a time) fitted, saturated.json (400 req/s
    into 16 seats) judged: vLLM bench JSON of a server whose one-row steps are slow."""
    d = tmp_path_factory.mktemp("verdict")
    prior = load_profile("batchlab-tiny-cpu")
    base = prior.cost_model()
    truth = replace(base, small_rows=(base.small_rows[0] + SLOW_ONE_ROW_S, *base.small_rows[1:]))
    cost = fitted_form_space(truth, prior.loop_overhead()).priced({})
    sched = SchedulerConfig(policy="continuous", max_num_seqs=SEATS, num_kv_blocks=2000)
    rng = np.random.default_rng(7)
    for name, rate, n in (("light", 0.5, 40), ("saturated", 400.0, 80)):
        w = Workload(np.cumsum(rng.exponential(1 / rate, n)), rng.integers(16, 512, n), rng.integers(8, 64, n))
        ttft, tpot = predict(Case(name, w, np.zeros(n), np.zeros(n)), sched, cost)
        _write(d / f"{name}.json", w, ttft * np.exp(rng.normal(0, 0.05, n)), tpot * np.exp(rng.normal(0, 0.05, n)))
    return d, prior


def _calibrate(d, out: str, *more: str):
    r = batchlab("calibrate", "--from-replay", str(d / "light.json"), str(d / "saturated.json"), *ENGINE,
                 "--holdout-every", "2", "--profile", "batchlab-tiny-cpu", "--out", str(d / out), *more, timeout=600)
    assert r.returncode == 0, r.stderr
    return r


def test_fit_worse_than_the_prior_writes_the_prior_and_says_why(light_then_saturated):
    d, prior = light_then_saturated
    r = _calibrate(d, "kept.json", "--format", "json")
    out = json.loads(r.stdout)
    fit, before = out["heldout"], out["heldout_prior"]
    assert fit["ttft_median_pct"] + fit["tpot_median_pct"] > before["ttft_median_pct"] + before["tpot_median_pct"]
    assert out["written"]["profile"] == WRITTEN_PRIOR and out["written"]["fit_worse_than_prior"]
    regimes = out["written"]["regimes"]
    assert regimes["fitted"]["saturated_share"] == 0.0 and regimes["fitted"]["mean_in_flight"] < 1
    assert regimes["judged"]["saturated_share"] >= REGIME_GAP and regimes["differ"]
    # JSON on stdout, the two warnings on stderr, one line each
    warned = [line for line in r.stderr.splitlines() if line.startswith("WARNING:")]
    assert warned == out["warnings"] and len(warned) == 2
    assert "did worse than the prior" in warned[0] and "different load regimes" in warned[1]
    kept = load_profile(d / "kept.json")
    assert kept.cost == prior.cost and kept.front_end.delay_s == 0.005  # the prior as judged
    assert "kept by calibrate --from-replay" in kept.notes and kept.num_kv_blocks == 2000
    assert kept.fit.regions["tpot"].median_ape == round(before["tpot_median_pct"], 2)


def test_keep_fit_writes_the_worse_fit_and_still_says_so(light_then_saturated):
    d, prior = light_then_saturated
    r = _calibrate(d, "fit.json", "--keep-fit")
    lines = r.stdout.splitlines()
    worse = [line for line in lines if line.startswith("WARNING: the fit did worse than the prior")]
    assert len(worse) == 1 and worse[0].endswith("the fit is written as --keep-fit asks")
    regime_line = [line for line in lines if "different load regimes" in line]
    assert len(regime_line) == 1 and f"of {SEATS} seats" in regime_line[0]
    fitted = load_profile(d / "fit.json")
    assert fitted.cost.overhead_s > prior.cost.overhead_s  # the light replay's slow batch-1 steps, learnt
    assert "fitted from request timings" in fitted.notes


def _errors(ttft: float, tpot: float) -> Errors:
    return Errors(50, ttft, 2 * ttft, tpot, 2 * tpot)


def test_decide_keeps_the_better_and_warns_on_regimes_either_way():
    light, busy = Regime(40, 80.0, 0.2, 16, 0.0), Regime(80, 9.0, 45.0, 16, 0.86)
    better = decide(_errors(3, 4), _errors(10, 10), False, light, busy)
    assert better.written == WRITTEN_FIT and not better.fit_worse
    (only,) = better.warnings()
    assert "different load regimes" in only and "0.2 requests in flight" in only and "86% of the time" in only
    worse = decide(_errors(10, 10), _errors(3, 4), False, light, light)
    assert worse.written == WRITTEN_PRIOR and worse.warnings() == [f"WARNING: {worse.why}"]
    assert decide(_errors(10, 10), _errors(3, 4), True, light, light).written == WRITTEN_FIT
    unjudged = decide(None, None, False, light, None)
    assert unjudged.written == WRITTEN_FIT and not unjudged.warnings()
    near = Regime(80, 9.0, 20.0, 16, REGIME_GAP - 0.01)
    assert not decide(_errors(3, 4), _errors(10, 10), False, light, near).regimes_differ


def _case(send, dur) -> Case:
    n = len(send)
    w = Workload(np.asarray(send, float), np.full(n, 16), np.full(n, 1))  # one token: finish = send + TTFT
    return Case("c", w, np.asarray(dur, float), np.full(n, np.nan))


intervals = st.lists(st.tuples(st.floats(0, 100), st.floats(1e-3, 50)), min_size=1, max_size=40)


@settings(max_examples=80, deadline=None)
@given(intervals, st.integers(1, 8))
def test_regime_measures_the_load_it_was_given(rows, seats):
    """Little's law over the span, a share within [0, 1] falling as seats grow, and none
    saturated with at least as many seats as requests."""
    rows = sorted(rows)  # a replay's requests in send order
    send, dur = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    c, m = _case(send, dur), np.ones(len(rows), bool)
    g = regime([c], [m], seats)
    span = float((send + dur).max() - send.min())
    assert g.span_s == pytest.approx(span)
    assert g.mean_in_flight == pytest.approx(dur.sum() / span, rel=1e-9)
    assert 0.0 <= g.saturated_share <= 1.0 + 1e-12
    assert regime([c], [m], seats + 1).saturated_share <= g.saturated_share + 1e-12
    assert regime([c], [m], len(rows)).saturated_share == 0.0


def test_in_flight_counts_the_other_parts_requests_too():
    """Four requests over [0, 10], the first two of them the part: over the part's span
    ([0, 10]) all four are in flight, so with three seats it is saturated throughout."""
    c = _case([0, 0, 0, 0], [10, 10, 10, 10])
    part = np.array([True, True, False, False])
    assert regime([c], [part], 3).saturated_share == 1.0
    dur, count = in_flight_profile(np.array([0.0, 2.0]), np.array([2.0, 3.0]), 0.0, 3.0)
    assert float(np.sum(dur * count)) == pytest.approx(3.0) and count.min() >= 0  # back to back: one at a time
