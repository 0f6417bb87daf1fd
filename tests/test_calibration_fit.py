"""The fitted cost form and its fit: exact recovery from synthetic timings, the decode
fast path equal to step-by-step, robustness to a bad point. No torch needed."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from batchlab.calibration.fit.fitted_form import SMALL_ROWS, fit
from batchlab.calibration.sweep.grid import default_grid, features_of
from batchlab.core.batch import StepFeatures
from batchlab.core.cost.fitted import FittedCostModel, PARAM_NAMES, Shape
from batchlab.core.cost.profile import Measurement
from batchlab.core.model.presets import MODELS

SHAPE = Shape.of(MODELS["batchlab-small"])
# Plausible CPU figures: 30 ms overhead, 20 GB/s weights, 90 GFLOP/s matmuls, ...
TRUTH = dict(overhead_s=0.016, per_seq_s=2e-4, per_chunk_s=5e-4, s_per_weight_byte=1 / 20e9,
             s_per_flop=1 / 90e9, s_per_kv_byte=1 / 4e9, s_per_attn_flop=1 / 60e9,
             after_prefill_s=0.0, after_idle_s=0.0,  # the sweep's points have no context
             s_per_masked_flop=1 / 45e9)  # the masked half of chunk attention: told apart
# from the causal pairs by the grid's chunks after 0, 256 and 1024 cached tokens
SMALL = (0.004, 0.012, -0.002, 0.001, -0.005, -0.006, 0.0, -0.004)  # zero-sum, as fitted


def synthetic(model: FittedCostModel, noise: float = 0.0, seed: int = 0) -> list[Measurement]:
    grid = default_grid()
    held = grid.heldout()
    rng = np.random.default_rng(seed)
    out = []
    for p in grid.points:
        f = features_of(p)
        t = model.step_time(f) * (1 + noise * rng.standard_normal())
        out.append(Measurement(point=p.key, region=p.region, features=f._asdict(),
                               median_s=t, mad_s=0.0, reps=5, heldout=p.key in held))
    return out


@pytest.mark.parametrize("combine", ["max", "sum"])
def test_fit_recovers_known_parameters_exactly(combine):
    truth = FittedCostModel(SHAPE, **TRUTH, small_rows=SMALL, combine=combine)
    pin = TRUTH["s_per_weight_byte"] if combine == "sum" else None
    res = fit(SHAPE, synthetic(truth), weight_s_per_byte=pin, forms=(combine,))
    got = res.model
    assert got.combine == combine
    for name in PARAM_NAMES:
        assert getattr(got, name) == pytest.approx(TRUTH[name], rel=1e-6), name
    assert got.small_rows == pytest.approx(SMALL, abs=1e-9)
    assert res.quality.heldout.max_ape < 1e-4 and res.quality.train.max_ape < 1e-4


def test_fit_picks_the_form_the_data_came_from():
    # max: a GPU-like crossover at 36 rows, beyond what the small-row terms can absorb
    slow_memory = {**TRUTH, "s_per_weight_byte": 1 / 5e9}
    for combine, params in (("max", slow_memory), ("sum", TRUTH)):
        truth = FittedCostModel(SHAPE, **params, combine=combine)
        res = fit(SHAPE, synthetic(truth), weight_s_per_byte=params["s_per_weight_byte"])
        assert res.model.combine == combine
        assert res.train_mean_ape[combine] < 1e-4
    assert res.train_mean_ape["max"] < 1e-4  # max nests sum: a tie goes to the simpler form


def test_noise_and_a_wild_point_do_not_derail_the_fit():
    truth = FittedCostModel(SHAPE, **TRUTH, combine="max")
    ms = synthetic(truth, noise=0.02, seed=1)
    i = next(i for i, m in enumerate(ms) if not m.heldout and m.point.startswith("d16"))
    ms[i] = ms[i].model_copy(update={"median_s": ms[i].median_s * 1.8})  # a contended point
    res = fit(SHAPE, ms, weight_s_per_byte=TRUTH["s_per_weight_byte"])
    assert res.quality.heldout.median_ape < 3.0
    assert res.model.flop_rate == pytest.approx(90e9, rel=0.1)


@pytest.mark.parametrize("combine", ["max", "sum"])
@pytest.mark.parametrize("context", [(0, 0), (1, 0), (0, 1)])
def test_decode_runs_vectorised_equal_step_by_step(combine, context):
    """With steady-decode and context terms: the first step has its own context, the
    later ones are steady (they follow a decode)."""
    model = FittedCostModel(SHAPE, **{**TRUTH, "after_prefill_s": 0.002, "after_idle_s": 0.005},
                            small_rows=SMALL, combine=combine, steady_s=-0.004)
    for b, ctx in ((1, 7), (2, 100), (3, 5), (9, 513), (64, 2000)):
        first = StepFeatures(num_seqs=b, decode_tokens=b, kv_tokens_read=b * (ctx + 1),
                             attention_pairs=b * (ctx + 1), after_prefill=context[0], after_idle=context[1])
        later = first._replace(after_prefill=0, after_idle=0)
        fast = model.decode_run_times(first, 50)
        slow = [model.step_time((first if j == 0 else later)._replace(
                    kv_tokens_read=first.kv_tokens_read + j * b, attention_pairs=first.attention_pairs + j * b))
                for j in range(50)]
        assert fast.tolist() == slow  # bit for bit: the simulator's fast-forward relies on it
        if context == (0, 0):  # the fast-forward's stretches of steady decodes (decode_times)
            for m in (3, 50):
                assert model.decode_times(b, first.kv_tokens_read, m) == slow[:m]


def test_steady_terms_price_only_a_decode_after_a_decode():
    base = FittedCostModel(SHAPE, **TRUTH)
    model = dataclasses.replace(base, steady_s=-0.003)
    dec = StepFeatures(num_seqs=5, decode_tokens=5, kv_tokens_read=500, attention_pairs=500)
    assert model.step_time(dec) == pytest.approx(base.step_time(dec) - 0.003, abs=1e-15)
    for other in (dec._replace(after_prefill=1), dec._replace(after_idle=1),
                  dec._replace(num_seqs=6, num_prefill_seqs=1, prefill_tokens=40)):
        assert model.step_time(other) == base.step_time(other)
    assert model.swept().step_time(dec) == base.step_time(dec)  # as the sweep timed it
    assert sum(model.parts(dec)) == pytest.approx(base.step_time(dec), rel=1e-12)


def test_small_rows_apply_to_their_row_count_only():
    base = FittedCostModel(SHAPE, **TRUTH)
    model = dataclasses.replace(base, small_rows=SMALL[:4])
    for rows in range(1, SMALL_ROWS + 3):
        f = StepFeatures(num_seqs=rows, decode_tokens=rows, kv_tokens_read=rows * 10, attention_pairs=rows * 10)
        extra = SMALL[rows - 1] if rows <= 4 else 0.0
        assert model.step_time(f) == pytest.approx(base.step_time(f) + extra, abs=1e-15)
    assert model.step_time(StepFeatures()) == 0.0


def test_scaled_what_if():
    m = FittedCostModel(SHAPE, **TRUTH, combine="sum")
    f = features_of(default_grid().points[-1])
    fast = m.scaled(bandwidth=2.0, flops=2.0, overhead=0.5)  # a machine twice as fast
    assert fast.step_time(f) == pytest.approx(m.step_time(f) / 2, rel=1e-12)
    assert fast.mem_bandwidth == pytest.approx(40e9) and fast.flop_rate == pytest.approx(180e9)


def test_row_counts_not_measured_get_no_correction():
    truth = FittedCostModel(SHAPE, **TRUTH, small_rows=(0.003, -0.001, 0.0, -0.002), combine="sum")
    ms = [m for m in synthetic(truth) if m.point[:3] not in ("d3x", "d5x", "d6x", "d7x", "d8x")]
    got = fit(SHAPE, ms, weight_s_per_byte=TRUTH["s_per_weight_byte"], forms=("sum",)).model
    assert got.small_rows == pytest.approx((0.003, -0.001, 0.0, -0.002), abs=1e-9)


def test_too_few_points_is_an_error():
    truth = FittedCostModel(SHAPE, **TRUTH)
    with pytest.raises(ValueError, match="measure more"):
        fit(SHAPE, synthetic(truth)[:4])
