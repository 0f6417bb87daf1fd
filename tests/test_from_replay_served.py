"""calibrate --endpoint against batchlab serve, where the truth is known: the server's own
steps.csv holds every step a client never sees. The priors are deliberately wrong (the
shipped profile with every fitted term 4x dear, and 4x cheap: 16x apart, so at least one is
far off whatever this machine's speed), so whatever the fits agree on they learned from the
request timings. Nothing depends on the machine's speed: the fits and the truth are
measured on the same server in the same minutes, and each tolerance is argued below."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from batchlab.calibration.from_replay.judge import UNSTEADY_PCT, per_request
from batchlab.calibration.from_replay.predict import NO_FRONT_END, Case, predict
from batchlab.calibration.from_replay.read import read_all
from batchlab.core.config import SchedulerConfig
from batchlab.core.features import IDLE_GAP_S
from batchlab.core.cost.profile import load_profile
from batchlab.core.run_folder import find_runs
from batchlab.core.step_table import step_features
from tests.serve_helpers import ServeProcess, batchlab

pytestmark = [pytest.mark.slow, pytest.mark.backend]
TERMS = ("overhead_s", "per_seq_s", "per_chunk_s", "s_per_weight_byte", "s_per_flop", "s_per_kv_byte",
         "s_per_attn_flop")
WRONG = 4.0
# How far (either way) the server's own late steps may stray from its earlier ones before
# no client can be asked to have learned them (server_moved). Measured on 2026-12-07: 0.97
# and 0.98 on a quiet machine, 1.04 beside one busy process, 1.23 with the two cores shared
# six ways, where the fitted profile's held-out TPOT error on load-fast was 58% (against 48).
MOVED = 1.15
ENGINE = ("--max-num-seqs", "16", "--num-kv-blocks", "4096")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("fromreplay")
    p = load_profile("batchlab-tiny-cpu")
    for name, k in (("dear", WRONG), ("cheap", 1 / WRONG)):
        wrong = p.model_copy(update={"cost": p.cost.model_copy(update={t: getattr(p.cost, t) * k for t in TERMS})})
        wrong.save(d / f"{name}.json")
    srv = ServeProcess("--model", "batchlab-tiny", "--threads", "1", *ENGINE, out=d / "srv")
    try:
        srv.wait_ready()
        cal = batchlab("calibrate", "--endpoint", srv.base, "--out", str(d / "probes"), *ENGINE,
                       "--profile", str(d / "dear.json"), "--format", "json", timeout=900)
        val = batchlab("validate", "--endpoint", srv.base, "--profile", str(d / "probes" / "profile.json"),
                       "--num-requests", "12", "--rate", "4", "--max-num-seqs", "16", "--num-kv-blocks", "4096",
                       "--no-progress", timeout=600)
    finally:
        srv.stop()
    assert cal.returncode == 0, cal.stderr
    # The same probes, read back as replays, fitted from the other prior.
    again = batchlab("calibrate", "--from-replay", *sorted(str(q) for q in (d / "probes").iterdir() if q.is_dir()),
                     *ENGINE, "--profile", str(d / "cheap.json"), "--out", str(d / "cheap-fit.json"),
                     "--format", "json", timeout=900)
    assert again.returncode == 0, again.stderr
    return d, json.loads(cal.stdout), val


def periods(run_dir):
    """The server's steps taken while requests were in flight: features and start-to-start
    period. A client waits the step and the loop's time until the next one (on this busy
    machine a median 1-7 ms, as the HTTP side competes for the cores), and cannot tell the
    two apart: the simulator's price plus its loop time stands for the period."""
    feats, period, _, _ = busy_steps(run_dir)
    return feats, period


def busy_steps(run_dir):
    """periods(), with each step's start and the requests' arrivals (server seconds)."""
    run = find_runs(run_dir)[0]
    steps = run.steps()
    with open(run.folder / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    arrival = np.array([float(r["arrival_s"]) for r in rows])
    finish = np.array([float(r["finish_s"]) for r in rows])
    start, dur = steps["start_s"], steps["duration_s"]
    end = start + dur
    period = np.append(np.diff(start), np.nan)
    waiting = np.array([np.any((arrival <= e) & (finish > e + IDLE_GAP_S)) for e in end])
    busy = np.isfinite(period) & waiting
    feats = [f for f, b in zip(step_features(steps), busy) if b]
    return feats, period[busy], start[busy], arrival


def server_moved(run_dir, last: int) -> float:
    """How far the server's own steps, while its last `last` requests were in, are from
    what its own earlier steps say they cost (a least-squares line through the earlier
    steps' periods, on the step's shape): the median of predicted over taken. Only the
    server's truth enters, no client's fit: ~1 where the server kept its speed."""
    feats, period, start, arrival = busy_steps(run_dir)
    late = start >= np.sort(arrival)[-last]
    x = np.array([[1.0, f.num_seqs, f.prefill_tokens, f.decode_tokens, f.kv_tokens_read] for f in feats])
    line, *_ = np.linalg.lstsq(x[~late], period[~late], rcond=None)
    return float(np.median(x[late] @ line / period[late]))


def level_error(profile_path, feats, period) -> tuple[float, float]:
    """(median |log(price / period)|, median price / period) over the server's busy steps."""
    cost = load_profile(profile_path).simulation_cost()
    r = np.array([cost.step_time(f) for f in feats]) / period
    return float(np.median(np.abs(np.log(r)))), float(np.median(r))


def test_fit_from_requests_prices_the_servers_own_steps(served):
    """From either prior, the fitted level falls within 1.5x of the server's own steps: the
    spread a client's TPOT shows between two runs of the same requests on this machine
    (docs/MEASURING.md: ~12-17% a request; up to 43% median TPOT measured while five
    sessions shared it), so a client cannot claim more. The step-by-step log error is under
    half of ln 4, the error each prior was given on purpose; the two priors are 16x apart,
    so a fit that kept either could not pass both."""
    d, out, _ = served
    skip_if_unsteady(out["floor"])
    feats, period = periods(d / "srv")
    assert len(feats) > 100
    for fitted, prior in (("probes/profile.json", "dear.json"), ("cheap-fit.json", "cheap.json")):
        fit_err, level = level_error(d / fitted, feats, period)
        prior_err, _ = level_error(d / prior, feats, period)
        assert 1 / 1.5 <= level <= 1.5, (fitted, level)
        assert fit_err < 0.5 * np.log(WRONG), (fitted, fit_err, prior_err)


def skip_if_unsteady(floor: dict) -> None:
    """Skip, saying so, where the two sends of the same requests differ beyond UNSTEADY_PCT:
    the machine's speed moved during the probes (a CI run on 2026-12-03 met 77%: the first
    probe's TTFT 5x its repeat's, while the server's steady decodes ran at their usual
    price), and what a client can learn is bounded by a spread no one figure states."""
    if max(floor["ttft_median_pct"], floor["tpot_median_pct"]) > UNSTEADY_PCT:
        pytest.skip(f"the two sends of the same requests differed by {floor['ttft_median_pct']:.0f}% (TTFT) "
                    f"and {floor['tpot_median_pct']:.0f}% (TPOT): the server's speed moved during the probes")


def request_errors(d, profile: str, c: Case) -> tuple[np.ndarray, np.ndarray]:
    """Per request, (TTFT, TPOT) |error| % of `profile` on one probe's case, as the fit's
    judgement computes them, in the test's engine settings."""
    p = load_profile(d / profile)
    cost, front = p.simulation_cost(), p.front_end.model() if p.front_end else NO_FRONT_END
    sched = SchedulerConfig(policy="continuous", max_num_seqs=16, num_kv_blocks=4096, block_size=16)
    ttft, tpot = predict(c, sched, cost, front)
    return per_request([(ttft, tpot, c.ttft, c.tpot)])


def probe_cases(d) -> dict[str, Case]:
    replays = read_all(sorted(str(q) for q in (d / "probes").iterdir() if q.is_dir()))
    return {Path(r.where.split(" (")[0]).name: Case.of(r) for r in replays}


def worse_than_spread(held: np.ndarray, spread: np.ndarray) -> float:
    """One-sided Mann-Whitney p-value that the held-out errors run larger than 1.5x the
    server's spread plus 5 points, request by request. A perfect simulator's expected
    error on one run is about the spread over sqrt(2) (independent noise on both sends);
    1.5x allows twice that. A rank test, not two medians side by side: the spread is one
    pair of 24 requests on a shared machine, its median seen anywhere from 4% to 28%
    between runs of this test minutes apart."""
    return float(mannwhitneyu(held, 1.5 * spread + 5, alternative="greater").pvalue)


def test_held_out_repeat_within_the_servers_own_spread(served):
    """load-b is load-a's request list sent again and judged, not fitted: their difference,
    request by request, is the server's own spread, the only held-out error a noise floor
    is known for. The fitted profile's errors on load-b must not run significantly larger
    (p < 0.01) than 1.5x that spread; and the test can fail: of the two priors, 16x apart,
    at least one does. Skipped, saying so, where the two sends differ beyond UNSTEADY_PCT:
    the machine then moved, not the fit."""
    d, out, _ = served
    held, floor = out["heldout"], out["floor"]
    assert any("load-b" in j for j in out["judged_on"]) and any("load-fast" in j for j in out["judged_on"])
    assert floor is not None and held["n"] == 48
    skip_if_unsteady(floor)
    cases = probe_cases(d)
    a, b = cases["load-a"], cases["load-b"]
    spread = per_request([(b.ttft, b.tpot, a.ttft, a.tpot)])
    assert np.median(spread[1]) == pytest.approx(floor["tpot_median_pct"], rel=1e-6)
    by_replay = {Path(r["replay"].split(" (")[0]).name: r["fit"] for r in out["heldout_by_replay"]}
    fitted = request_errors(d, "probes/profile.json", b)
    # The judgement's own figures, recomputed per request: the same requests, the same medians.
    assert np.median(fitted[0]) == pytest.approx(by_replay["load-b"]["ttft_median_pct"], rel=1e-6)
    for errs, what, s in zip(fitted, ("TTFT", "TPOT"), spread):
        p = worse_than_spread(errs, s)
        assert p >= 0.01, (what, p, by_replay, floor)
    priors = [min(worse_than_spread(e, s) for e, s in zip(request_errors(d, prior, b), spread))
              for prior in ("dear.json", "cheap.json")]
    assert min(priors) < 0.01, priors


def test_held_out_other_load_far_better_than_the_priors(served):
    """load-fast (twice the rate, replies twice as long) is judged only, and no repeat of
    it measures the server's spread there: its claim is the fit's, that the timings taught
    what the priors got wrong. One of the two priors, 16x apart, is at least 4x off
    whatever this machine's speed (75% off or more); the fitted profile's median TTFT and
    TPOT error on load-fast must be under half the worse prior's."""
    d, out, _ = served
    skip_if_unsteady(out["floor"])
    fast = probe_cases(d)["load-fast"]
    moved = server_moved(d / "srv", len(fast))
    if not 1 / MOVED <= moved <= MOVED:
        pytest.skip(f"the server's own steps during load-fast were priced {moved:.2f}x by its own earlier "
                    f"steps: its speed moved between the fitted probes and the judged one")
    fitted = [float(np.median(e)) for e in request_errors(d, "probes/profile.json", fast)]
    worst = [max(float(np.median(e)) for e in pair)
             for pair in zip(request_errors(d, "dear.json", fast), request_errors(d, "cheap.json", fast))]
    assert min(worst) >= 75, worst  # what the priors were made to be
    assert all(f < w / 2 for f, w in zip(fitted, worst)), (fitted, worst)


def test_output_says_settings_sources_and_what_was_dropped(served):
    _, out, _ = served
    s = out["settings"]
    assert s["max_num_seqs"] == {"value": 16, "source": "given"}
    # batchlab serve states its settings on /metrics as vLLM does; the options given win
    assert s["block_size"] == {"value": 16, "source": "server /metrics"}
    assert s["policy"] == {"value": "continuous", "source": "server /metrics"}
    assert all(v == {} for v in out["dropped"].values())  # nothing failed against a healthy server
    assert {t["status"] for t in out["terms"]} <= {"told", "together", "weak", "untold"}


def test_validate_endpoint_judges_the_fitted_profile(served):
    _, _, val = served
    assert val.returncode == 0, val.stderr
    assert "profile.json" in val.stdout
    # Fitted to that server's timings: named after it, not after the CPU the prior was made on.
    assert "batchlab-tiny on cpu (served at http://127.0.0.1:" in val.stdout
    assert "machine speed per replay (" in val.stdout  # the speed probes around the replay


def test_the_fit_names_the_server_it_was_fitted_to(served):
    d, _, _ = served
    fitted = load_profile(d / "probes" / "profile.json")
    assert fitted.device.name.startswith("served at http://127.0.0.1:") and fitted.device.threads is None
    prior = load_profile("batchlab-tiny-cpu")
    assert fitted.device.kind == prior.device.kind == "cpu" and prior.device.name != fitted.device.name
