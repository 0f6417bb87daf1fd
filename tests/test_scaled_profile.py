"""A GPU without operator tables borrows a measured GPU's profile scaled by datasheet ratios
(core/cost/gpu_profile.py scaled_to); the scaling's own error, measured between GPUs that
have tables (calibration/operators/scaling.py), travels with it as an interval: shown in
the assumptions line, a knob `capacity --sensitivity` moves, and nothing on a GPU with its
own profile."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.calibration.operators.build import read_layers
from batchlab.calibration.operators.scaling import Measured, interval, judge_pair, judge_scaling
from batchlab.core.cost.gpu_profile import (SCALED_PRICE, SCALED_PRICE_INTERVAL, load_gpu_profile, scaled_to)
from batchlab.core.features import StepFeatures
from batchlab.core.model.hardware import HARDWARE
from batchlab.core.model.presets import MODELS
from batchlab.experiments.capacity.tasks import build_tasks
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.setup import sim_setup
from batchlab.experiments.setup.knobs import price_knobs, with_knobs
from tests.operator_tables import SHAPES, TOKENS, TPS, TRUE, row, shared_vidur, write_csv


def h200() -> object:
    return scaled_to(load_gpu_profile("h100-sxm"), HARDWARE["h100-sxm"], HARDWARE["h200"])


def config(name: str, **hardware) -> ExperimentConfig:
    return ExperimentConfig.model_validate({"model": {"name": "llama-3-8b"},
                                            "hardware": {"name": name, **hardware}})


def test_a_borrowed_profile_carries_the_measured_interval_as_a_knob():
    p = h200()
    lo, hi = SCALED_PRICE_INTERVAL
    assert lo < 1 < hi  # measured: scaling misses both ways
    assert (p.scaled_from.price_low, p.scaled_from.price_high, p.scaled_from.price) == (lo, hi, 1.0)
    knob = p.knobs()[-1]
    assert knob.name == SCALED_PRICE and knob.ends() == (lo, hi) and "h200 borrows h100-sxm" in knob.source
    assert f"x{lo:.2f}-x{hi:.2f}" in p.describe()
    own = load_gpu_profile("h100-sxm")
    assert SCALED_PRICE not in {k.name for k in own.knobs()}
    with pytest.raises(ValueError, match="h100-sxm's profile is its own"):
        own.with_values({SCALED_PRICE: 1.1})


@settings(max_examples=40, deadline=None)
@given(st.floats(0.5, 2.0), st.integers(1, 64), st.integers(0, 2048), st.integers(1, 4000))
def test_the_scaled_price_moves_the_operators_and_not_the_engine_loop(k, seqs, prefill, context):
    """At TP 1 (no all-reduce) a step is the engine's loop (step_s + seq_s a sequence) plus
    the operators: the knob multiplies the operators exactly by k."""
    p = h200()
    chunk = 1 if prefill else 0
    f = StepFeatures(num_seqs=seqs, num_prefill_seqs=chunk, prefill_tokens=prefill, decode_tokens=seqs - chunk,
                     kv_tokens_read=seqs * context + prefill, attention_pairs=seqs * context + prefill)
    model, hw = MODELS["llama-3-8b"], HARDWARE["h200"]
    loop = p.params["step_s"].value + p.params["seq_s"].value * seqs
    base = p.cost(model, 1, hw).step_time(f) - loop
    moved = p.with_values({SCALED_PRICE: k}).cost(model, 1, hw).step_time(f) - loop
    assert moved == pytest.approx(k * base, rel=1e-9)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, True, 1e4])
def test_a_scaled_price_out_of_bounds_is_one_line(bad):
    with pytest.raises(ValueError) as e:
        h200().with_values({SCALED_PRICE: bad})
    assert "scaled_price" in str(e.value) and "expected a factor > 0" in str(e.value) and "\n" not in str(e.value)


def test_assumptions_show_the_interval_only_where_the_profile_is_borrowed():
    lines = "\n".join(sim_setup(config("h200")).assumptions())
    lo, hi = SCALED_PRICE_INTERVAL
    assert (f"h100-sxm's constants scaled by datasheet ratios; such scaling between the A100, H100 and A40 "
            f"measured x{lo:.2f}-x{hi:.2f} of its price, varied by --sensitivity") in lines
    own = sim_setup(config("h100-sxm"))
    assert "such scaling" not in "\n".join(own.assumptions())
    assert not own.meta.recorded("gpu_profile_scaled_interval")  # its meta.json keys as before


def test_sensitivity_varies_the_scaled_price_over_the_interval():
    cfg = config("h200")
    knob = next(k for k in price_knobs(cfg, traffic=False) if k.name == SCALED_PRICE)
    assert knob.ends() == SCALED_PRICE_INTERVAL
    tasks = build_tasks("max-rate", cfg, None, [], 0.05, None, sensitivity=True)
    ends = {(v.end, v.value) for v, *_ in tasks if v is not None and v.knob == SCALED_PRICE}
    assert ends == {("low", SCALED_PRICE_INTERVAL[0]), ("high", SCALED_PRICE_INTERVAL[1])}
    f = StepFeatures(32, 0, 0, 32, 32 * 1000, 32 * 1000)
    base = sim_setup(cfg).cost.step_time(f)
    high = sim_setup(with_knobs(cfg, {SCALED_PRICE: SCALED_PRICE_INTERVAL[1]})).cost.step_time(f)
    assert high > base
    assert SCALED_PRICE not in {k.name for k in price_knobs(config("h100-sxm"), traffic=False)}
    with pytest.raises(UserError, match="no knob 'scaled_price'"):
        with_knobs(config("h100-sxm"), {SCALED_PRICE: 1.1})


def _gpu(root, gpu: str, params) -> Measured:
    """Exact tables of SHAPES on `gpu`, priced by the GPU form at `params` on its datasheet."""
    vidur = {"a100-80gb": "a100", "h100-sxm": "h100"}[gpu]
    for name, heads, kv, hidden, inter, vocab in SHAPES:
        rows = [row(heads, kv, hidden, inter, vocab, tp, t, gpu=gpu, params=params) for tp in TPS for t in TOKENS]
        write_csv(root / "compute" / vidur / "org" / name / "mlp.csv", rows)
    return Measured.of(HARDWARE[gpu], read_layers(root, vidur)[0])


def test_scaling_judged_exact_where_the_datasheets_tell_all_and_off_where_they_do_not(tmp_path):
    """Two GPUs whose operators reach the same fractions of their datasheets: scaling one to
    the other prices it as its own fit does (ratio 1). The target 1.25x slower than its
    datasheet says on every operator term: scaled from the source, it runs 1.25x the price
    (and the reverse 0.8x), which the interval spans."""
    a100 = _gpu(tmp_path / "same", "a100-80gb", TRUE)
    same = judge_pair(a100, _gpu(tmp_path / "same", "h100-sxm", TRUE))
    assert same.held == 9 and all(r == pytest.approx(1.0, abs=0.01) for r in same.ratio.values())
    assert same.scaled["all"].median < 0.01
    slow = _gpu(tmp_path / "slow", "h100-sxm", TRUE.scaled(1.25, 1.25))
    pairs = judge_scaling([_gpu(tmp_path / "slow", "a100-80gb", TRUE), slow])
    to_slow = next(p for p in pairs if p.target == "h100-sxm")
    assert all(r == pytest.approx(1.25, rel=0.01) for r in to_slow.ratio.values())
    assert to_slow.own["all"].median < 0.01 < to_slow.scaled["all"].median
    lo, hi = interval(pairs)
    assert lo == pytest.approx(0.8, rel=0.01) and hi == pytest.approx(1.25, rel=0.01)


@pytest.mark.heavy
def test_the_shipped_interval_is_what_the_shared_tables_measure():
    """SCALED_PRICE_INTERVAL is benchmarks/scaled_profile_interval.py's answer on
    ../shared/gpu-profiles (minutes: every pair's leave-one-out fits)."""
    root = shared_vidur()
    from batchlab.calibration.operators.vidur import VIDUR_GPUS
    measured = [Measured.of(HARDWARE[g], read_layers(root, v)[0]) for g, v in VIDUR_GPUS.items()]
    lo, hi = interval(judge_scaling(measured))
    assert (lo, hi) == pytest.approx(SCALED_PRICE_INTERVAL, abs=5e-4)
