"""The served-engine terms (core/cost/served/) and their fit on benchmark rows
(calibration/served_bench/fit.py, calibrate --from-served)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from batchlab.calibration.served_bench.fit import START, fit, predict, served_cost
from batchlab.calibration.served_bench.read import read_benchmarks
from batchlab.core.cost.gpu_form import AllReduce
from batchlab.core.cost.served.allreduce import EngineAllReduce
from batchlab.core.cost.served.engine import VLLM
from batchlab.core.cost.served.profile import HeldOutStats, load_served_profile, shipped_served_profile
from batchlab.core.cost.served.terms import GRAPH_FIXED_SHARE, SYMM_MEM_EFFICIENCY, ServedTerms
from batchlab.core.features import StepFeatures
from batchlab.experiments.validation.served_benchmarks import recorded_rows
from tests.helpers import cli, one_line_error
from tests.test_served_bench import line, table

# Nine small configurations of one model at two TP degrees: enough rows for seven terms.
ROWS = [line(c=c, tp=tp, isl=512, osl=24, ttft=str(40 + c), tpot=str(round(9 + c / 8 + 4 / tp, 2)))
        for tp in (2, 4) for c in (2, 4, 8, 16)] + [line(c=32, tp=2, isl=512, osl=24, ttft="90", tpot="15")]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = table(tmp_path_factory.mktemp("served"), *ROWS)
    return path, *recorded_rows(read_benchmarks(path), progress=False)


def test_the_engine_facts_are_vllms():
    # capture sizes to min(2 x max_num_seqs, 512); the own all-reduce for 2/4/6/8 GPUs on NVLink
    assert VLLM.max_capture_tokens(1024) == 512 and VLLM.max_capture_tokens(16) == 32
    assert VLLM.custom_allreduce(8, nvlink=True) and VLLM.custom_allreduce(2, nvlink=False)
    assert not VLLM.custom_allreduce(4, nvlink=False) and not VLLM.custom_allreduce(3, nvlink=True)


def test_the_all_reduce_takes_vllms_path_for_the_message_size():
    # Hopper with symmetric memory: the own all-reduce to 256 KiB at 8 GPUs, multimem to 64 MiB
    p8 = VLLM.allreduce_paths("h100-sxm", 8, nvlink=True)
    assert (p8.custom_below, p8.symm_below, p8.multimem) == (256 * 1024, 64 * 2**20, True)
    p2 = VLLM.allreduce_paths("h200", 2, nvlink=True)
    assert (p2.custom_below, p2.symm_below, p2.multimem) == (8 * 2**20, 64 * 2**20, False)
    # an A100 has no symmetric-memory path: the own all-reduce to 8 MiB, NCCL above
    a = VLLM.allreduce_paths("a100-80gb", 8, nvlink=True)
    assert (a.custom_below, a.symm_below) == (8 * 2**20, 0)
    table_ = {8: ((1.0, 2.0**30), (20e-6, 20e-6 * 2**30 / 1.0 * 1e-6))}
    ar = EngineAllReduce(table_, 0.0, 400e9, custom_scale=0.5, custom_below=p8.custom_below,
                         symm_below=p8.symm_below, multimem=True, symm_efficiency=0.8)
    nccl = AllReduce(table_, 0.0, 400e9)
    assert ar.time(128 * 1024, 8) == 0.5 * nccl.time(128 * 1024, 8)
    assert ar.time(2**20, 8) == 0.5 * nccl.time(1.0, 8) + 2**20 / (400e9 * 0.8)
    assert ar.time(2**27, 8) == nccl.time(2**27, 8)
    two_shot = dataclasses.replace(ar, multimem=False)
    assert two_shot.time(2**20, 8) == 0.5 * nccl.time(1.0, 8) + 1.75 * 2**20 / (400e9 * 0.8)


def test_a_term_out_of_its_physical_bounds_is_refused():
    with pytest.raises(ValueError, match="graph_fixed_share = 1.5: expected"):
        dataclasses.replace(START, graph_fixed_share=1.5)


def test_recorded_rows_price_the_served_engine_as_step_by_step(recorded):
    _, recs, prices = recorded
    for r, p in zip(recs, prices):
        cost = served_cost(p, START)
        steps = [r.batches[b]._replace(**dict(zip(
            ("kv_tokens_read", "attention_pairs", "masked_pairs", "window_kv_tokens_read", "window_attention_pairs",
             "prefill_attention_pairs", "prefill_self_pairs"), map(int, c)))) for b, c in zip(r.batch_of, r.counts)]
        exact = np.array([cost.step_time(f) for f in steps])
        assert np.allclose(r.durations(cost), exact, rtol=1e-7, atol=0)


def test_graphs_and_the_engines_all_reduce_make_a_decode_step_cheaper(recorded):
    _, _, prices = recorded
    p = prices[0]
    decode = StepFeatures(8, 0, 0, 8, 8 * 512, 8 * 512)
    eager = dataclasses.replace(START, graph_fixed_share=1.0, custom_allreduce_scale=1.0)
    graphs = dataclasses.replace(eager, graph_fixed_share=0.2)
    assert served_cost(p, graphs).step_time(decode) < served_cost(p, eager).step_time(decode)
    ar = dataclasses.replace(eager, custom_allreduce_scale=0.2)
    assert served_cost(p, ar).step_time(decode) < served_cost(p, eager).step_time(decode)
    # a step past the largest capture size runs eagerly: no graph share applies
    big = StepFeatures(8, 1, 4000, 8, 8 * 512 + 4000, 8 * 512 + 4000 * 4001 // 2)
    assert served_cost(p, graphs).step_time(big) == served_cost(p, eager).step_time(big)


def test_the_fit_finds_terms_that_reproduce_rows_made_with_known_terms(recorded):
    _, recs, prices = recorded
    truth = ServedTerms(graph_fixed_share=1.0, custom_allreduce_scale=0.3, symm_mem_efficiency=SYMM_MEM_EFFICIENCY.prior,
                        attention_speedup=1.5,
                        elementwise_share=0.4, bf16_gemm_speedup=1.2, step_s=0.4e-3, seq_s=8e-6)
    made = predict(recs, prices, truth)
    synthetic = [dataclasses.replace(r, row=dataclasses.replace(r.row, tpot_s=m.tpot_s)) for r, m in zip(recs, made)]
    f = fit(synthetic, prices)
    assert f.rms_log < 0.01  # the rows are told apart to 1%, whichever terms the fit lands on
    # the graphs' share is held at its prior, not fitted (terms.py GRAPH_FIXED_SHARE)
    assert "graph_fixed_share" in f.held and f.terms.graph_fixed_share == GRAPH_FIXED_SHARE.prior == 1.0
    # so is the symmetric-memory all-reduce's efficiency (terms.py SYMM_MEM_EFFICIENCY: published figures)
    assert "symm_mem_efficiency" in f.held and f.terms.symm_mem_efficiency == SYMM_MEM_EFFICIENCY.prior
    refit = predict(synthetic, prices, f.terms)
    assert all(abs(a.tpot_s / b.tpot_s - 1) < 0.02 for a, b in zip(refit, made))


def test_calibrate_from_served_writes_a_profile_validate_judges_with(recorded, tmp_path):
    path = recorded[0]
    out = tmp_path / "served.json"
    code, text, err = cli(["calibrate", "--from-served", str(path), "--leave-out", "tp", "--out", str(out),
                           "--format", "json"])
    assert code == 0, err
    report = json.loads(text)
    assert report["profile"] == str(out) and set(report["terms"]) == set(ServedTerms.names())
    # TP 4's four rows left out leave five to fit six terms: not judged; TP 2's five leave four: neither
    assert report["heldout"] == []
    assert load_served_profile(out).served_terms() == ServedTerms(**report["terms"])
    # what the rows tell of each fitted term: a spread for every one neither held nor at a bound
    fitted = set(ServedTerms.names()) - set(load_served_profile(out).held) - set(report["at_bound"])
    assert set(report["spread"]) == fitted and all(v >= 1.0 for v in report["spread"].values())
    assert set(report["flat"]) <= set(report["untold"]) <= fitted
    assert all(abs(p["correlation"]) > 0.9 and set(p["terms"]) <= fitted - set(report["flat"])
               for p in report["together"])
    code, text, err = cli(["validate", "--served-benchmarks", str(path), "--served-engine", str(out)])
    assert code == 0, err
    assert f"the served engine ({out})" in text


def test_too_few_rows_and_bad_profiles_are_one_line_errors(tmp_path):
    code, _, err = cli(["calibrate", "--from-served", str(table(tmp_path, *ROWS[:3])), "--out",
                        str(tmp_path / "s.json")])
    one_line_error(code, err, "3 configurations cannot tell 6 served-engine terms apart")
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1}')
    code, _, err = cli(["validate", "--served-benchmarks", str(table(tmp_path, *ROWS[:2], name="t.csv")),
                        "--served-engine", str(bad)])
    one_line_error(code, err, str(bad))
    code, _, err = cli(["calibrate", "--from-served", str(table(tmp_path, *ROWS[:3], name="u.csv")),
                        "--leave-out", "gpu"])
    one_line_error(code, err, "--leave-out 'gpu'")


def test_the_fit_prices_the_rows_as_the_judge_simulates_them(recorded):
    # recorded under the judge's client (perturbed, 10 requests a user): a price of the recorded
    # steps gives the means simulating the row again gives, at the kernels' sum and served
    from batchlab.experiments.validation.served_benchmarks import predict as simulated
    _, recs, prices = recorded
    shipped = load_served_profile(shipped_served_profile()).served_terms()
    for r, p in list(zip(recs, prices))[::4]:
        for cost, served in ((p.base, "none"), (served_cost(p, shipped), "vllm")):
            ttft, tpot = r.priced(cost)
            again = simulated(r.row, "perturbed", served)
            assert ttft == pytest.approx(again.ttft_s, rel=1e-9) and tpot == pytest.approx(again.tpot_s, rel=1e-9)


def test_a_client_whose_sends_fall_between_steps_is_not_recorded(recorded):
    from batchlab.calibration.served_bench.recorded import record
    from batchlab.experiments.setup import sim_setup
    from batchlab.experiments.validation.served_benchmarks import config_for
    _, recs, _ = recorded
    setup = sim_setup(config_for(recs[0].row, "none"))
    for client in ("staggered", "burst"):
        with pytest.raises(ValueError, match=f"client model '{client}' cannot be recorded"):
            record(recs[0].row, setup.cost, next(iter(setup.schedulers.values())), setup.blocks, client=client)


def _with_fold(tmp_path, terms: dict, left_out: str = "qwen3-32b"):
    """The shipped profile holding one fold, fitted without `left_out`, of these terms."""
    p = load_served_profile(shipped_served_profile())
    fold = HeldOutStats(by="model", left_out=left_out, rows=1, tpot_median_pct=1.0, tpot_p90_pct=1.0,
                        slow_share=0.5, terms=terms)
    path = tmp_path / f"with-{left_out}.json"
    p.model_copy(update={"heldout": [fold]}).save(path)
    return path


def test_validate_held_out_prices_each_row_by_the_fold_without_its_model(recorded, tmp_path):
    path = recorded[0]
    slower = {**load_served_profile(shipped_served_profile()).terms, "bf16_gemm_speedup": 0.6, "step_s": 2e-3}
    just_fold = tmp_path / "fold.json"
    load_served_profile(shipped_served_profile()).model_copy(update={"terms": slower}).save(just_fold)

    def rows(*flags):
        code, out, err = cli(["validate", "--served-benchmarks", str(path), "--format", "json", *flags])
        assert code == 0, err
        return json.loads(out)["rows"]
    held = rows("--served-engine", str(_with_fold(tmp_path, slower)), "--held-out")
    assert held == rows("--served-engine", str(just_fold))
    assert held != rows()  # the shipped profile's own terms price the rows otherwise
    code, text, err = cli(["validate", "--served-benchmarks", str(path), "--held-out"])
    assert code == 0, err
    assert "each row by the fold of the shipped served-engine terms (vLLM) fitted without its model" in text


def test_held_out_without_a_fold_for_the_model_or_a_profile_is_one_line(recorded, tmp_path):
    path = recorded[0]
    other = _with_fold(tmp_path, load_served_profile(shipped_served_profile()).terms, left_out="gpt-oss-120b")
    code, _, err = cli(["validate", "--served-benchmarks", str(path), "--served-engine", str(other), "--held-out"])
    one_line_error(code, err, "--held-out: the served profile holds no fold fitted without qwen3-32b")
    code, _, err = cli(["validate", "--served-benchmarks", str(path), "--served-engine", "none", "--held-out"])
    one_line_error(code, err, "--held-out prices each row by a served profile's fold")
