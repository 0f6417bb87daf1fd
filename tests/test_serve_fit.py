"""Fitting the cost model to served step tables: known coefficients come back from
synthetic tables (steps priced by a known model), per step kind. No torch needed."""
from __future__ import annotations

import numpy as np
import pytest

from batchlab.calibration.served.from_run import split
from batchlab.calibration.fit.served_steps import judge, kinds, missing_kinds, predict, refine
from batchlab.core.step_table import step_features as features
from batchlab.calibration.served.runs import ServedRun
from batchlab.core.run_meta import RunMeta
from batchlab.core.features import StepFeatures
from batchlab.core.cost.fitted import FittedCostModel, is_steady
from tests.profiles import BASE, served_table


@pytest.mark.parametrize("mem,comp", [(1.3, 1.3), (0.75, 1.1)])
def test_refine_recovers_both_levels_chunk_and_context_terms_exactly(mem, comp):
    """Served steps priced by a known model whose memory and compute sides run at other
    levels than the profile's (measured: decodes 0.75x the sweep, prefills ~1.0x)."""
    truth = BASE.scaled(1 / mem, 1 / comp, mem)
    truth = FittedCostModel(**{**{f: getattr(truth, f) for f in truth.__dataclass_fields__},
                               "per_chunk_s": truth.per_chunk_s + 0.0015,
                               "per_seq_s": truth.per_seq_s + 0.0002,
                               "after_prefill_s": 0.0007, "after_idle_s": 0.0011, "steady_s": -0.0009})
    steps = served_table(truth)
    feats = features(steps)
    got, levels = refine(BASE, feats, steps["duration_s"])
    assert levels.memory == pytest.approx(mem, rel=1e-6) and levels.compute == pytest.approx(comp, rel=1e-6)
    for name in ("per_chunk_s", "after_prefill_s", "after_idle_s", "overhead_s", "s_per_flop",
                 "s_per_weight_byte", "s_per_attn_flop", "per_seq_s"):
        assert getattr(got, name) == pytest.approx(getattr(truth, name), rel=1e-5), name
    assert got.steady_s == pytest.approx(-0.0009, abs=1e-8)
    assert np.allclose(predict(got, feats), steps["duration_s"], rtol=1e-9)


def test_parts_add_up_to_the_step_price():
    steps = served_table(BASE, n=30)
    for cost in (BASE, FittedCostModel(**{**{f: getattr(BASE, f) for f in BASE.__dataclass_fields__},
                                          "combine": "max"})):
        for f in features(steps):
            f = f._replace(after_prefill=0, after_idle=0)
            assert sum(cost.parts(f)) == pytest.approx(cost.step_time(f), rel=1e-12)


def test_refine_prices_the_mean_step_not_the_typical_one():
    """Every step priced right but one in four 20% slow (a skewed machine): the robust
    fit finds the typical step, the result is re-levelled so that the total matches, of
    the prefill-bearing steps (the compute side) and of the steady decodes (their fixed
    term)."""
    steps = served_table(BASE, seed=2)
    y = steps["duration_s"].copy()
    y[::4] *= 1.2
    feats = features(steps)
    got, _ = refine(BASE, feats, y)
    pred = predict(got, feats)
    prefill = steps["prefill_tokens"] > 0
    steady = np.array([is_steady(f) for f in feats])
    assert steady.sum() > 100 and (~prefill & ~steady).sum() > 10
    for side in (prefill, steady):  # each kind's total, not only the sum of both
        assert pred[side].sum() == pytest.approx(y[side].sum(), rel=1e-3)
    assert pred.sum() > predict(BASE, feats).sum() * 1.03  # the typical step alone is short


def test_refine_resists_a_few_contended_steps():
    truth = FittedCostModel(**{**{f: getattr(BASE, f) for f in BASE.__dataclass_fields__},
                               "after_prefill_s": 0.0005, "after_idle_s": 0.001})
    steps = served_table(truth, seed=1)
    y = steps["duration_s"].copy()
    y[::17] *= 3.0  # a busy neighbour
    got, levels = refine(BASE, features(steps), y)
    assert levels.memory == pytest.approx(1.0, rel=0.02) and levels.compute == pytest.approx(1.0, rel=0.03)
    assert got.after_idle_s == pytest.approx(0.001, rel=0.15)


def test_step_kinds_and_judgement():
    steps = served_table(BASE, n=30)
    k = kinds(steps)
    assert k["after_idle"].sum() >= 3 and k["mixed"].any() and k["small_chunk"].any()
    assert not (k["decode"] & k["prefill"]).any()
    j = judge(np.array([1.0, 2.0, 4.0]), np.array([0.9, 2.2, 4.0]))
    assert j["n"] == 3 and j["median_ape"] == 10.0 and j["faster_share"] == pytest.approx(1 / 3, abs=1e-3)
    assert missing_kinds(features(steps), ("after_idle",)) == []
    decode_only = [f for f in features(steps) if not f.prefill_tokens]
    assert missing_kinds(decode_only, ("prefill",)) == ["0 prefill step(s)"]


def test_holding_out_runs_or_the_tail_of_one():
    steps = served_table(BASE, n=20)
    runs = [ServedRun(f"r{i}", RunMeta(), steps) for i in range(4)]
    train, held, fitted, judged = split(runs, 3)
    assert judged == ["r1"] and fitted == ["r0", "r2", "r3"]
    train, held, _, _ = split(runs[:1], 3)
    n = steps["duration_s"].size
    assert held[0]["duration_s"].size == round(n / 4) and train[0]["duration_s"].size == n - round(n / 4)
    assert held[0]["start_s"].min() > train[0]["start_s"].max()  # the tail, in time order


def test_sweep_times_prefill_points_in_shapes_never_run_before():
    from batchlab.calibration.sweep.grid import GridPoint
    from batchlab.calibration.sweep.runner import fresh_count, fresh_variant, widest_variant
    seen: set = set()
    for point in (GridPoint(chunk=16), GridPoint(chunk=8, cached=16), GridPoint(4, 32, 16, 0)):
        got = []
        n = min(12, fresh_count(point))
        assert n >= 7
        for _ in range(n):
            v = fresh_variant(point, seen)
            seen.add(v)
            got.append(v)
        assert len(set(got)) == n, point  # never the same shape twice
        assert all(abs(v.chunk - point.chunk) <= max(3, point.chunk // 8) for v in got)
        wide = widest_variant(point, n)
        assert all(v.chunk <= wide.chunk and v.cached <= wide.cached for v in got)
    assert fresh_variant(GridPoint(8, 64), seen) == GridPoint(8, 64)  # decodes as they are


def test_serving_phase_workload_has_distinct_prompts_at_half_load():
    from batchlab.calibration.sweep.serve_phase import LOAD, workload
    w = workload(BASE, 512, 20.0, seed=3, max_context=256)
    assert len(set(w.prompt_len.tolist())) == len(w) >= 12
    assert w.prompt_len.min() >= 2 and (w.prompt_len + w.output_len).max() <= 256
    assert w.prompt_len.min() <= 8  # chunks down to a few tokens
    busy = sum(BASE.step_time(StepFeatures(1, 1, int(p), 0, int(p), int(p) * (int(p) + 1) // 2))
               + (o - 1) * BASE.step_time(StepFeatures(1, 0, 0, 1, int(p), int(p)))
               for p, o in zip(w.prompt_len, w.output_len))
    assert 0.25 < busy / w.arrival[-1] < 1.0  # about LOAD of the time busy
    assert LOAD == 0.5


def test_serving_phase_bursts_arrive_together_with_longer_replies():
    """The burst run: requests BURST at a time (runs of steady decodes of several
    sequences), still about LOAD of the time busy."""
    from batchlab.calibration.sweep.serve_phase import BURST, BURST_OUTPUT, MAX_OUTPUT, POLICIES, workload
    w = workload(BASE, 512, 20.0, seed=4, max_context=2048, burst=BURST, max_output=BURST_OUTPUT)
    _, sizes = np.unique(w.arrival, return_counts=True)
    assert (sizes[:-1] == BURST).all() and 1 <= sizes[-1] <= BURST and len(sizes) >= 2
    assert w.output_len.max() > MAX_OUTPUT and w.output_len.max() <= BURST_OUTPUT
    assert ("continuous", None, BURST, BURST_OUTPUT) in POLICIES


@pytest.mark.parametrize("fixed", [-1.0, float("nan")])
def test_serving_phase_refuses_a_sweep_fit_that_prices_steps_below_zero(fixed):
    """A sweep timed on a loaded machine can fit a negative term: the phase is not sized
    from it (it failed with numpy's "scale < 0"); the fit is refused with the reason."""
    from dataclasses import replace as with_

    from batchlab.calibration.sweep.contention import ContendedCalibration
    from batchlab.calibration.sweep.serve_phase import workload
    bad = with_(BASE, overhead_s=fixed)
    assert not BASE.step_time(StepFeatures(1, 0, 0, 1, 8, 8)) + fixed > 0
    with pytest.raises(ContendedCalibration, match="at or below 0 s"):
        workload(bad, 512, 5.0, seed=1, max_context=256)
    assert len(workload(BASE, 512, 5.0, seed=1, max_context=256)) >= 12
