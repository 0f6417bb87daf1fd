"""calibrate --from-replay --server-run: the step and front-end terms a client's timings
confuse, measured from the server's own tables. The server run is made here: the
simulator serves the probes' kind of requests under a known truth (its step table and
request table, on a clock of its own, written as batchlab serve writes them), the
client's timings are its TTFTs from the send; then the terms are measured back and must
come out within the tolerances stated, or keep the prior and say so where the run cannot
tell them. No server, no wall clock: deterministic on any machine."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from batchlab.calibration.from_replay.fit import REQUEST_OVERHEAD, SERIAL, SERIAL_PRIOR
from batchlab.calibration.from_replay.measured_terms import measure
from batchlab.calibration.from_replay.predict import Case
from batchlab.calibration.from_replay.server_run import read_server_run
from batchlab.calibration.from_replay.space import fitted_form_space
from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.at_speed import CostAtSpeed
from batchlab.core.cost.loop_time import Overhead
from batchlab.core.cost.profile import load_profile
from batchlab.core.front_end import FrontEnd
from batchlab.core.run_folder import RunSet
from batchlab.core.workload.workload import Workload
from batchlab.sim.simulate import simulate
from tests.serve_helpers import batchlab

SCHED = SchedulerConfig(policy="continuous", max_num_seqs=16, num_kv_blocks=2000)
BASE = load_profile("batchlab-tiny-cpu").cost_model()
# The truth: the after-idle step 3x the prior's, a chunk 2x, a front end of 4 ms and 1 ms.
TRUTH = replace(BASE, after_idle_s=BASE.after_idle_s * 3, per_chunk_s=BASE.per_chunk_s * 2)
FRONT = FrontEnd(0.004, 0.001)
SERVER_CLOCK = 500.0  # the server's clock runs this far ahead of the client's
HANDLING_S = 0.0015  # the app stamps a request's arrival this long before the engine sees it
STEP_NOISE = 0.05  # lognormal sd of a step's measured duration
GAP_NOISE_S = 0.0005  # sd of the client's TTFT beyond the engine's (the network, the stream)
# Stated tolerances of the measured terms against the truth.
STEP_TOLERANCE = 0.15  # relative
FRONT_TOLERANCE_S = 0.0005


def probes(rng, sparse: bool, loaded: bool, bursts: bool) -> list[Workload]:
    """Replays of the probes' kinds: short prompts to an idle server, a Poisson load, bursts."""
    out = []
    if sparse:
        out.append(Workload(0.5 * np.arange(16), rng.integers(16, 257, 16), np.full(16, 16)))
    if loaded:
        n = 40
        out.append(Workload(np.cumsum(rng.exponential(0.1, n)), rng.integers(16, 512, n), rng.integers(8, 48, n)))
    if bursts:
        out.append(Workload(np.repeat([0.0, 3.0], 8), np.full(16, 32), np.full(16, 24)))
    return out


def served(directory, workloads: list[Workload], seed: int = 0, loop: Overhead | None = None) -> list[Case]:
    """The workloads served one after another by the truth, behind FRONT: the server's run
    folder (with three warm-up requests first, not replayed) and the client's cases. loop:
    the serving loop's time before each step (the simulator adds it to the step's duration;
    the server's table starts the step after it and times the step alone, each gap within
    GAP_SPREAD of its mean)."""
    rng = np.random.default_rng(seed)
    warm = Workload(np.array([0.0, 0.3, 0.6]), np.array([40, 300, 40]), np.array([8, 8, 8]))
    starts, t = [], 5.0
    for w in workloads:
        starts.append(t)
        t += float(w.arrival[-1]) + 10.0
    sends = np.concatenate([warm.arrival] + [w.arrival + s for w, s in zip(workloads, starts)])
    engine = np.concatenate([FRONT.arrivals(warm.arrival)[0]]
                            + [FRONT.arrivals(w.arrival)[0] + s for w, s in zip(workloads, starts)])
    plen = np.concatenate([warm.prompt_len] + [w.prompt_len for w in workloads])
    olen = np.concatenate([warm.output_len] + [w.output_len for w in workloads])
    res = simulate(Workload(engine, plen, olen), SCHED, CostAtSpeed(TRUTH, loop=loop), SCHED.num_kv_blocks,
                   fast_forward=False)
    req, steps = res.requests, dict(res.steps)
    if loop is None:
        steps["duration_s"] = steps["duration_s"] * np.exp(rng.normal(0, STEP_NOISE, len(steps["duration_s"])))
    else:  # the noise is the gaps' (it moves the next start with it): a step ends, the gap, the next starts
        n = len(steps["duration_s"])
        gap = (loop.per_step_s + loop.per_seq_s * steps["num_seqs"]) * (1 + rng.uniform(-GAP_SPREAD, GAP_SPREAD, n))
        steps["start_s"], steps["duration_s"] = steps["start_s"] + gap, steps["duration_s"] - gap
    for table in (req, steps):
        for c in [c for c in table if c.endswith("_s") and c != "duration_s"]:
            table[c] = table[c] + SERVER_CLOCK
    req["arrival_s"] = req["arrival_s"] - HANDLING_S
    first, finish = np.empty(len(sends)), np.empty(len(sends))
    first[req["request_id"].astype(int)] = req["first_token_s"] - SERVER_CLOCK
    finish[req["request_id"].astype(int)] = req["finish_s"] - SERVER_CLOCK
    ttft = first - sends + rng.normal(0, GAP_NOISE_S, len(sends))
    tpot = (finish - first) / np.maximum(olen - 1, 1)
    meta = res.meta.model_copy(update={"world": "real", "source": "serve", "policy": "continuous"})
    RunSet(directory).add("continuous", replace(res, requests=req, steps=steps, meta=meta), {})
    cases, k = [], len(warm)
    for i, (w, s) in enumerate(zip(workloads, starts)):
        idx = np.arange(k, k + len(w))
        cases.append(Case(f"probe {i}", w, ttft[idx], tpot[idx]))
        k += len(w)
    return cases


def vllm_records(directory, cases: list[Case]) -> list:
    """The cases as vLLM bench's --save-detailed JSON files, one a case."""
    paths = []
    for k, c in enumerate(cases):
        out = c.workload.output_len.tolist()
        d = {"model_id": "batchlab-tiny", "backend": "vllm", "input_lens": c.workload.prompt_len.tolist(),
             "output_lens": out, "ttfts": c.ttft.tolist(), "itls": [[float(g)] * (o - 1) for g, o in zip(c.tpot, out)],
             "start_times": c.workload.arrival.tolist(), "errors": [""] * len(c)}
        paths.append(directory / f"r{k}.json")
        paths[-1].write_text(json.dumps(d))
    return paths


def test_a_served_run_with_known_terms_is_measured_back(tmp_path):
    """Short prompts after idle, a load and bursts: the after-idle and chunk costs within
    STEP_TOLERANCE of the truth, the front end's delay and handling time within
    FRONT_TOLERANCE_S, every replay found in the server's table despite its other clock."""
    cases = served(tmp_path / "srv", probes(np.random.default_rng(1), True, True, True))
    server = read_server_run(tmp_path / "srv")
    got = measure(cases, [np.ones(len(c), bool) for c in cases], server, fitted_form_space(BASE, None))
    assert got.requests == sum(len(c) for c in cases), got.lines
    for name in ("after_idle_s", "per_chunk_s"):
        assert got.values[name] == pytest.approx(getattr(TRUTH, name), rel=STEP_TOLERANCE), (name, got.lines)
    assert got.values[REQUEST_OVERHEAD] == pytest.approx(FRONT.delay_s, abs=FRONT_TOLERANCE_S), got.lines
    assert got.values[SERIAL] == pytest.approx(FRONT.serial_s, abs=FRONT_TOLERANCE_S), got.lines


# The loop's truth: batchlab serve's on this project's VM (run D, docs/results/2026-12-06-engineers-loop.md).
LOOP = Overhead(0.00052, 0.000094, 0.0, 0)
LOOP_TOLERANCE = 0.1  # relative, each term
GAP_SPREAD = 0.3  # each gap uniform within this share of its mean


def test_the_loop_between_steps_is_measured_back_and_simulated_by_the_fit(tmp_path):
    """A server whose loop spends time between back-to-back steps (a cost a step and a
    cost a sequence): both terms measured back within LOOP_TOLERANCE from its step table,
    said in a line, and a fit on it writes the loop into the profile it makes."""
    cases = served(tmp_path / "srv", probes(np.random.default_rng(3), True, True, True), loop=LOOP)
    server = read_server_run(tmp_path / "srv")
    got = measure(cases, [np.ones(len(c), bool) for c in cases], server, fitted_form_space(BASE, None))
    assert got.loop is not None, got.lines
    assert got.loop.per_step_s == pytest.approx(LOOP.per_step_s, rel=LOOP_TOLERANCE), got.lines
    assert got.loop.per_seq_s == pytest.approx(LOOP.per_seq_s, rel=LOOP_TOLERANCE), got.lines
    assert any(line.startswith("the serving loop's time between steps: 0.5") for line in got.lines), got.lines
    # Without the loop the server's steps follow each other at once: only the steps' noise
    # (a step timed longer or shorter, the next start where it was) shows between them.
    plain = served(tmp_path / "plain", probes(np.random.default_rng(3), True, True, True))
    none = measure(plain, [np.ones(len(c), bool) for c in plain], read_server_run(tmp_path / "plain"),
                   fitted_form_space(BASE, None))
    assert none.loop is not None, none.lines
    assert none.loop.per_step_s + SCHED.max_num_seqs * none.loop.per_seq_s < 0.05 * LOOP.per_step_s, none.lines
    r = batchlab("calibrate", "--from-replay", *map(str, vllm_records(tmp_path, cases)), "--max-num-seqs", "16",
                 "--num-kv-blocks", "2000", "--server-run", str(tmp_path / "srv"), "--keep-fit",
                 "--out", str(tmp_path / "fit.json"), timeout=600)
    assert r.returncode == 0, r.stderr
    # The CLI judges the second replay (one in three) and measures on the other two alone.
    fitted_on = measure(cases, [np.full(len(c), k != 1) for k, c in enumerate(cases)], server,
                        fitted_form_space(BASE, None)).loop
    assert fitted_on is not None and fitted_on.per_seq_s != got.loop.per_seq_s
    written = load_profile(str(tmp_path / "fit.json")).loop
    assert written is not None and written.per_seq_s == pytest.approx(fitted_on.per_seq_s, rel=1e-3), r.stdout
    assert "the serving loop's time between steps: " in r.stdout


def test_what_the_run_cannot_tell_keeps_the_prior_and_says_which(tmp_path):
    """Only short prompts to an idle server: every prefill is one chunk right after an idle
    gap, so the chunk and after-idle costs move together, and no request waits in the front
    end behind another: all three keep their priors, each with a line naming its partner;
    the front end's delay is still measured."""
    cases = served(tmp_path / "srv", probes(np.random.default_rng(2), True, False, False))
    server = read_server_run(tmp_path / "srv")
    got = measure(cases, [np.ones(len(c), bool) for c in cases], server, fitted_form_space(BASE, None))
    assert "after_idle_s" not in got.values and "per_chunk_s" not in got.values and SERIAL not in got.values
    text = "\n".join(got.lines)
    assert "after_idle_s: held at the prior's" in text and "moves only with per_chunk_s" in text
    assert "per_chunk_s: held at the prior's" in text and "moves only with after_idle_s" in text
    assert f"{SERIAL}: held at the prior's {SERIAL_PRIOR * 1e3:.2f} ms" in text
    assert f"told only with {REQUEST_OVERHEAD}" in text
    assert got.values[REQUEST_OVERHEAD] == pytest.approx(FRONT.delay_s + FRONT.serial_s - SERIAL_PRIOR,
                                                         abs=FRONT_TOLERANCE_S)


def test_held_out_requests_lend_no_steps(tmp_path):
    """Only the requests fitted on are measured: with the fitted mask empty for a replay,
    none of its requests or steps is used."""
    cases = served(tmp_path / "srv", probes(np.random.default_rng(1), True, True, False))
    server = read_server_run(tmp_path / "srv")
    masks = [np.ones(len(cases[0]), bool), np.zeros(len(cases[1]), bool)]
    got = measure(cases, masks, server, fitted_form_space(BASE, None))
    assert got.requests == len(cases[0])


def test_cli_server_run_measures_and_the_verdict_still_judges(tmp_path):
    """End to end: vLLM-format records of the replays and the server's folder. Without the
    folder, the client's timings tell the after-idle cost only with the front end: it keeps
    its prior, said in a line. With it, the terms are measured, and the held-out verdict
    (the load replay, never fitted on) finds the fit better than the prior and writes it."""
    cases = served(tmp_path / "srv", probes(np.random.default_rng(1), True, True, True))
    paths = vllm_records(tmp_path, cases)
    common = ("calibrate", "--from-replay", *map(str, paths), "--max-num-seqs", "16", "--num-kv-blocks", "2000",
              "--out", str(tmp_path / "fit.json"))
    r = batchlab(*common, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "after_idle_s: held at the prior's 0.0009707: the timings tell it only together with" in r.stdout
    r = batchlab(*common, "--server-run", str(tmp_path / "srv"), "--format", "json", timeout=600)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    terms = {t["name"]: t for t in out["terms"]}
    assert terms["after_idle_s"]["status"] == terms[REQUEST_OVERHEAD]["status"] == "measured"
    assert terms["after_idle_s"]["value"] == pytest.approx(TRUTH.after_idle_s, rel=STEP_TOLERANCE)
    assert out["heldout"]["ttft_median_pct"] < out["heldout_prior"]["ttft_median_pct"]
    assert out["written"]["profile"] == "fit"


def test_cli_server_run_of_something_else_is_one_line(tmp_path):
    p = tmp_path / "r.json"
    n = 30
    p.write_text(json.dumps({"model_id": "batchlab-tiny", "backend": "vllm", "input_lens": [32] * n,
                             "output_lens": [4] * n, "ttfts": [0.05] * n, "itls": [[0.01] * 3] * n,
                             "start_times": list(np.arange(n) * 0.5), "errors": [""] * n}))
    (tmp_path / "srv").mkdir()
    r = batchlab("calibrate", "--from-replay", str(p), "--server-run", str(tmp_path / "srv"),
                 "--num-kv-blocks", "2000", timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "--server-run" in r.stderr


from tests.test_calibrate_endpoint_resume import calibrate, server  # noqa: E402,F401 (the stand-in server)


def test_endpoint_with_a_server_still_running_fits_and_says_how_to_refit(server, tmp_path, capsys):
    """--endpoint --server-run DIR while the server still serves (DIR not yet written): the
    probes are fitted on the client's timings, and one line gives the command that refits
    them with the server's tables once it has stopped; that command's --from-replay DIR
    expands to the finished probes in the order sent, the judged ones as --endpoint splits."""
    from batchlab.calibration.from_replay.probes import HELD, design
    from batchlab.experiments.calibrate.probe_run import probe_folders
    out, srv = tmp_path / "probes", tmp_path / "srv"
    assert calibrate(out, "--server-run", str(srv)) == 0
    assert len(server.fitted) == 1
    err = capsys.readouterr().err
    hint = [line for line in err.splitlines() if line.startswith(f"--server-run {srv}: no run folder yet")]
    assert len(hint) == 1
    assert f"batchlab calibrate --from-replay {out} " in hint[0] and f"--server-run {srv}" in hint[0]
    paths, judged = probe_folders([str(out)])
    assert paths == [str(out / n) for n, _ in design(1024, 16)]
    assert judged == {str(out / n) for n in HELD}
