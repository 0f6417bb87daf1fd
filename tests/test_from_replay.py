"""calibrate --from-replay: the readers (counting what they cannot use), bad input as
one-line errors, and the fit recovering a known truth from simulated request timings
(no server, no wall clock: deterministic on any machine)."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.calibration.from_replay.fit import fit
from batchlab.calibration.from_replay.predict import Case, predict
from batchlab.calibration.from_replay.read import read_all, read_one
from batchlab.calibration.from_replay.settings import parse_metrics
from batchlab.calibration.from_replay.space import fitted_form_space, gpu_form_space, prior_space
from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.profile import load_profile
from tests.serve_helpers import batchlab

SCHED = SchedulerConfig(policy="continuous", max_num_seqs=16, num_kv_blocks=2000)


def vllm_result(n=30, seed=0, model="batchlab-tiny", **over) -> dict:
    rng = np.random.default_rng(seed)
    out = rng.integers(4, 20, n).tolist()
    d = {"model_id": model, "backend": "vllm", "input_lens": rng.integers(16, 200, n).tolist(),
         "output_lens": out, "ttfts": (rng.uniform(0.02, 0.1, n)).tolist(),
         "itls": [[0.01] * (o - 1) for o in out], "start_times": np.cumsum(rng.uniform(0, 0.2, n)).tolist(),
         "errors": [""] * n}
    d.update(over)
    return d


def test_vllm_reader_counts_failed_and_unusable_rows(tmp_path):
    d = vllm_result()
    d["errors"][0] = "HTTP 500"
    d["output_lens"][0] = 0
    d["itls"][1] = [0.01, -0.5]  # a negative gap
    d["ttfts"][2] = None
    d["itls"][3] = [0.01, None]  # a gap that is not a number
    d["itls"][4] = d["itls"][4] + [0.02]  # one chunk more than tokens - 1: kept (its span counts)
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    (r,) = read_one(p)
    assert r.fmt == "vllm-bench" and r.model == "batchlab-tiny"
    assert len(r.requests) == 26 and r.failed == 1 and r.unusable == 3
    assert r.requests[0].send_s == 0.0  # relative to the first send
    q = r.requests[-1]
    assert q.e2e_s == pytest.approx(q.ttft_s + 0.01 * (q.output_len - 1))


def test_a_record_with_many_broken_rows_is_refused(tmp_path):
    d = vllm_result(n=30)
    for i in range(5):
        d["ttfts"][i] = None  # 5 of 30: beyond 10%
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="5 of 30 rows have missing or out-of-order timings"):
        read_all([str(p)])
    d["ttfts"][1:5] = [0.05] * 4  # 1 of 30: counted, not fatal
    p.write_text(json.dumps(d))
    (r,) = read_all([str(p)])
    assert r.unusable == 1 and len(r.requests) == 29


def test_cli_replay_of_another_model_than_the_prior(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(vllm_result(model="batchlab-small")))
    r = batchlab("calibrate", "--from-replay", str(p), "--profile", "batchlab-tiny-cpu", "--num-kv-blocks", "100",
                 timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "model 'batchlab-small'" in r.stderr


def test_sglang_reader_rebuilds_closed_loop_send_times(tmp_path):
    d = {"backend": "sglang", "dataset_name": "random", "request_rate": float("inf"), "max_concurrency": 1,
         "input_lens": [10, 20, 30], "output_lens": [3, 3, 3], "ttfts": [0.1, 0.2, 0.3],
         "itls": [[0.05, 0.05]] * 3, "errors": ["", "", ""]}
    p = tmp_path / "s.jsonl"
    p.write_text(json.dumps(d).replace("Infinity", '"inf"') + "\n")
    (r,) = read_one(p)
    assert r.fmt == "sglang-bench"
    assert [q.send_s for q in r.requests] == pytest.approx([0.0, 0.2, 0.5])  # one slot: each after the previous ends


def test_sglang_poisson_without_start_times_is_refused(tmp_path):
    d = {"backend": "sglang", "dataset_name": "random", "request_rate": 4.0, "max_concurrency": None, "input_lens": [1],
         "output_lens": [1], "ttfts": [0.1], "itls": [[]], "errors": [""]}
    p = tmp_path / "s.jsonl"
    p.write_text(json.dumps(d) + "\n")
    with pytest.raises(ValueError, match="request_rate 4.0 without start_times"):
        read_one(p)


def test_mixed_models_and_too_few_requests_are_refused(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(vllm_result()))
    b.write_text(json.dumps(vllm_result(model="other")))
    with pytest.raises(ValueError, match="must be of one model"):
        read_all([str(a), str(b)])
    b.write_text(json.dumps(vllm_result(n=5)))
    c = tmp_path / "c.json"
    c.write_text(json.dumps(vllm_result(n=5)))
    with pytest.raises(ValueError, match="too few usable requests"):
        read_all([str(b), str(c)])


def test_cli_settings_that_cannot_serve_the_replay(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(vllm_result()))
    r = batchlab("calibrate", "--from-replay", str(p), "--num-kv-blocks", "2", timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "cannot serve" in r.stderr and "num_kv_blocks 2 (given)" in r.stderr


def test_metrics_settings_from_cache_config_info():
    text = ('# HELP vllm:cache_config_info x\nvllm:cache_config_info{block_size="32",cache_dtype="auto",'
            'enable_prefix_caching="False",num_gpu_blocks="4096"} 1.0\nvllm:num_requests_running 0\n')
    assert parse_metrics(text) == {"block_size": 32, "prefix_caching": False, "num_kv_blocks": 4096}
    assert parse_metrics("vllm:num_requests_running 0\n") == {}


def test_cli_bad_input_is_one_line_exit_2(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"ttfts": []}))
    r = batchlab("calibrate", "--from-replay", str(p), timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and str(p) in r.stderr


def _observed(truth, rates, seed=0, noise=0.05, front=None):
    """Cases whose 'observed' timings are the truth's simulation (behind the front end
    `front`: default the fit's prior one, as a served TTFT holds one), with lognormal noise."""
    from batchlab.calibration.from_replay.fit import REQUEST_OVERHEAD_PRIOR, SERIAL_PRIOR
    from batchlab.core.front_end import FrontEnd
    front = front or FrontEnd(REQUEST_OVERHEAD_PRIOR, SERIAL_PRIOR)
    rng = np.random.default_rng(seed)
    space = fitted_form_space(truth, None)
    cases = []
    for rate, n in rates:
        from batchlab.core.workload.workload import Workload
        w = Workload(np.cumsum(rng.exponential(1 / rate, n)), rng.integers(16, 1024, n), rng.integers(4, 64, n))
        t, tp = predict(Case("truth", w, np.zeros(n), np.zeros(n)), SCHED, space.priced({}), front)
        cases.append(Case(f"rate {rate}", w, t * np.exp(rng.normal(0, noise, n)),
                          tp * np.exp(rng.normal(0, noise, n))))
    return cases


def test_fit_recovers_what_the_data_tell_and_holds_the_rest():
    """A truth 1.5x / 0.6x / 2x the prior on three terms: what the fit says it was told is
    within its own stated uncertainty of the truth (2 sd), what it says it was not told
    stays exactly at the prior, what it says is told only together names its partners,
    and the fit reaches the timings' noise. The truth's front end is the prior's (a served
    TTFT holds one; a term the fit cannot tell apart is held at the prior)."""
    base = load_profile("batchlab-tiny-cpu").cost_model()
    truth = replace(base, overhead_s=base.overhead_s * 1.5, s_per_flop=base.s_per_flop * 0.6,
                    s_per_kv_byte=base.s_per_kv_byte * 2)
    cases = _observed(truth, [(2, 50), (20, 50)])
    masks = [np.ones(len(c), bool) for c in cases]
    space = fitted_form_space(base, None)
    res = fit(cases, masks, SCHED, space)
    for t in res.terms:
        ratio = t.value / (t.prior if t.name in ("request_overhead_s", "frontend_serial_s") else getattr(truth, t.name))
        if t.status in ("told", "weak"):
            assert abs(np.log(ratio)) <= 2 * np.log(t.sd_factor), (t.name, ratio, t.sd_factor)
        elif t.status == "untold":
            assert t.value == t.prior
        else:  # told only in combination: it says with which terms
            assert t.status == "together" and t.partners
    assert any(t.told for t in res.terms) and res.rms < 0.15  # at the noise (0.05), not the prior's


def test_one_prompt_length_one_load_leaves_prompt_terms_untold():
    """Every request the same prompt and output, sent one at a time: nothing varies the
    prompt length or the batch, so the terms that scale with them (matmul FLOPs against
    attention pairs against the per-chunk cost; per sequence against the fixed cost)
    cannot be told apart: none of those groups is reported told term by term."""
    base = load_profile("batchlab-tiny-cpu").cost_model()
    truth = replace(base, s_per_flop=base.s_per_flop * 2)
    from batchlab.core.workload.workload import Workload
    n = 40
    w = Workload(np.arange(n) * 2.0, np.full(n, 256), np.full(n, 16))
    space = fitted_form_space(truth, None)
    t, tp = predict(Case("one", w, np.zeros(n), np.zeros(n)), SCHED, space.priced({}))
    res = fit([Case("one", w, t, tp)], [np.ones(n, bool)], SCHED, fitted_form_space(base, None))
    status = {q.name: q.status for q in res.terms}
    prefill = ("per_chunk_s", "s_per_flop", "s_per_attn_flop")
    assert sum(status[q] == "told" for q in prefill) <= 1, status
    assert not (status["per_seq_s"] == "told" and status["overhead_s"] == "told"), status
    assert res.rms < 0.05  # it still fits the timings: the combination is told


def test_cli_roofline_prior_for_a_gpu_server_record(tmp_path):
    """A vLLM record of a GPU server no profile was measured for: --model PRESET --hardware
    NAME price the prior from the datasheet. The timings are simulated from that prior made
    1.6x slower on every term; the fit must move toward it (held-out error below the
    prior's) and write a profile of the preset's shape on that hardware."""
    from batchlab.calibration.from_replay.prior import roofline_prior
    from batchlab.core.model.hardware import HARDWARE
    from batchlab.core.model.presets import MODELS
    from batchlab.core.workload.workload import Workload
    prior = roofline_prior(MODELS["llama-3.1-8b"], HARDWARE["h100-sxm"], 0.8, 0.6, 0.002)
    base = prior.cost_model()
    truth = replace(base, **{t: getattr(base, t) * 1.6 for t in ("overhead_s", "per_seq_s", "per_chunk_s",
                    "s_per_weight_byte", "s_per_flop", "s_per_kv_byte", "s_per_attn_flop")})
    sched = SchedulerConfig(max_num_seqs=64, num_kv_blocks=prior.num_kv_blocks)
    rng = np.random.default_rng(3)
    for k, rate in enumerate((4, 30, 60)):
        n = 40
        w = Workload(np.cumsum(rng.exponential(1 / rate, n)), rng.integers(64, 2048, n), rng.integers(8, 128, n))
        t, tp = predict(Case("t", w, np.zeros(n), np.zeros(n)), sched, fitted_form_space(truth, None).priced({}))
        out = w.output_len.tolist()
        d = {"model_id": "meta-llama/Llama-3.1-8B-Instruct", "backend": "vllm",
             "input_lens": w.prompt_len.tolist(), "output_lens": out, "ttfts": t.tolist(),
             "itls": [[float(g)] * (o - 1) for g, o in zip(tp, out)], "start_times": w.arrival.tolist(),
             "errors": [""] * n}
        (tmp_path / f"r{k}.json").write_text(json.dumps(d))
    r = batchlab("calibrate", "--from-replay", *(str(tmp_path / f"r{k}.json") for k in range(3)),
                 "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--max-num-seqs", "64",
                 "--out", str(tmp_path / "fit.json"), "--format", "json", timeout=600)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["heldout"]["tpot_median_pct"] < out["heldout_prior"]["tpot_median_pct"]
    assert out["written"]["profile"] == "fit" and not out["warnings"]  # better than the prior: no word
    assert out["settings"]["num_kv_blocks"]["source"] == "the prior profile"
    fitted = load_profile(tmp_path / "fit.json")
    assert fitted.model.name == "llama-3.1-8b" and fitted.device.name == "h100-sxm"


def test_cli_gpu_form_prior_is_refitted_in_its_own_constants(tmp_path):
    """A CPU profile priced by the GPU form (new calibrations are): --from-replay fits the
    GPU form's constants. Timings simulated from the prior with a 1.5x step cost and a
    0.6x compute efficiency: the held-out error falls below the prior's, the written
    profile is priced by the GPU form with constants moved toward that truth, and the
    fitted form's `cost` is the prior's, untouched."""
    from batchlab.calibration.fit.both_forms import refit
    from batchlab.core.workload.workload import Workload
    prior = refit(load_profile("batchlab-tiny-cpu"), "gpu")
    (tmp_path / "prior.json").write_text(prior.model_dump_json())
    base = prior.cost_model()
    space = prior_space(base, prior.model, None)
    assert set(space.names) >= {"step_s", "compute_efficiency", "mem_efficiency"}
    truth = space.fitted({"step_s": base.params.step_s * 1.5,
                          "compute_efficiency": base.params.compute_efficiency * 0.6})
    sched = SchedulerConfig(max_num_seqs=16, num_kv_blocks=prior.num_kv_blocks)
    rng = np.random.default_rng(5)
    for k, rate in enumerate((2, 8, 20)):
        n = 30
        w = Workload(np.cumsum(rng.exponential(1 / rate, n)), rng.integers(16, 512, n), rng.integers(4, 48, n))
        t, tp = predict(Case("t", w, np.zeros(n), np.zeros(n)), sched,
                        gpu_form_space(truth, prior.model, None).priced({}))
        out = w.output_len.tolist()
        d = {"model_id": "batchlab-tiny", "backend": "vllm", "input_lens": w.prompt_len.tolist(),
             "output_lens": out, "ttfts": t.tolist(), "itls": [[float(g)] * (o - 1) for g, o in zip(tp, out)],
             "start_times": w.arrival.tolist(), "errors": [""] * n}
        (tmp_path / f"r{k}.json").write_text(json.dumps(d))
    r = batchlab("calibrate", "--from-replay", *(str(tmp_path / f"r{k}.json") for k in range(3)),
                 "--profile", str(tmp_path / "prior.json"), "--max-num-seqs", "16",
                 "--out", str(tmp_path / "fit.json"), "--format", "json", timeout=600)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["heldout"]["tpot_median_pct"] < out["heldout_prior"]["tpot_median_pct"]
    fitted = load_profile(tmp_path / "fit.json")
    assert fitted.form == "gpu" and fitted.cost == prior.cost
    assert fitted.gpu_form.step_s.value > prior.gpu_form.step_s.value
    assert "GPU form refitted" in fitted.notes


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 10), min_size=1, max_size=40), st.floats(0, 0.1), st.floats(0, 0.05))
def test_front_end_queue_invariants(sends, delay, serial):
    """Arrivals keep the send order, none before its send + delay + serial, and a request
    queued behind another arrives exactly one handling time after it."""
    from batchlab.core.front_end import FrontEnd
    send = np.sort(np.array(sends))
    arrival, ahead = FrontEnd(delay, serial).arrivals(send)
    assert np.all(np.diff(arrival) >= 0)
    assert np.all(arrival >= send + delay + serial - 1e-12)
    queued = ahead[1:] > 0
    assert np.allclose(arrival[1:][queued], arrival[:-1][queued] + serial)
    assert np.allclose(arrival[~np.r_[False, queued]], (send + delay + serial)[~np.r_[False, queued]])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.floats(-1, 5)), st.integers(0, 50),
                          st.integers(0, 50), st.one_of(st.none(), st.floats(-1, 5)), st.booleans()),
                min_size=1, max_size=30))
def test_every_row_is_used_or_counted(rows):
    """Whatever a record holds, each row ends either used or dropped with a reason; used
    rows are ordered in time from 0."""
    from batchlab.calibration.from_replay.observed import Builder
    b = Builder("x", "test")
    for send, plen, olen, ttft, failed in rows:
        b.add(send, plen, olen, ttft, None, [0.01] * max(olen - 1, 0), "boom" if failed else "")
    r = b.done(None)
    assert len(r.requests) + sum(r.dropped.values()) == len(rows)
    sends = [q.send_s for q in r.requests]
    assert sends == sorted(sends) and (not sends or sends[0] == 0.0)
    assert all(q.ttft_s > 0 and q.e2e_s >= q.ttft_s for q in r.requests)


def _replay_folder(directory, with_gaps: bool):
    """A batchlab replay --out folder, written by replay's own writers from made-up outcomes:
    20 finished (5 tokens, 10 ms apart) and one failed."""
    from batchlab.core.run_folder import to_json
    from batchlab.experiments.output import ResultWriter
    from batchlab.experiments.replay.outcome import Outcome
    from batchlab.experiments.replay.results import run_result, vllm_bench_json
    from batchlab.experiments.replay.sender import Replay
    rep = Replay(t0=100.0)
    for i in range(21):
        o = Outcome(i, 30 + i, 5, start=100.0 + 0.1 * i)
        if i == 7:
            o.error, o.end = "HTTP 500: boom", o.start + 0.01
        else:
            o.first = o.start + 0.05
            o.token_times = [o.first + 0.01 * k for k in range(5)]
            o.end, o.usage_tokens = o.token_times[-1], 5
        rep.outcomes[i] = o
    meta = {"endpoint": "http://127.0.0.1:1/v1/completions", "model": "batchlab-tiny"}
    result = run_result(rep, meta)
    w = ResultWriter(directory, {})
    w.add("replay", result, result.summary())
    if with_gaps:
        (directory / "result.json").write_text(to_json(vllm_bench_json(rep, result.summary(), result.meta, 1.0, 1.0)))


@pytest.mark.parametrize("with_gaps", [True, False])
def test_batchlab_replay_folder_read_back(tmp_path, with_gaps):
    d = tmp_path / "rep"
    _replay_folder(d, with_gaps)
    (r,) = read_one(d)
    assert r.fmt == "batchlab-replay" and r.model == "batchlab-tiny" and r.endpoint.endswith("/completions")
    assert len(r.requests) == 20 and r.failed == 1 and r.unusable == 0
    q = r.requests[0]
    assert q.ttft_s == pytest.approx(0.05) and q.tpot_s == pytest.approx(0.01)
    assert (q.gaps is not None) == with_gaps  # without result.json: the span only


def test_a_spread_beyond_a_steady_servers_is_called_unsteady():
    from batchlab.calibration.from_replay.judge import UNSTEADY_PCT, Errors
    steady = Errors(24, UNSTEADY_PCT, 80.0, UNSTEADY_PCT, 90.0)  # the p90s do not count
    assert not steady.unsteady
    assert Errors(24, UNSTEADY_PCT + 1, 0.0, 10.0, 0.0).unsteady
    assert Errors(24, 10.0, 0.0, UNSTEADY_PCT + 1, 0.0).unsteady
