"""The machine's speed measured on both sides of a fitted profile: the memory side from a
run's steady decode steps, the compute side from its compute-bound steps (prefills of a
few hundred tokens), and the profile re-priced at both (experiments/machine_speed.py)."""
from __future__ import annotations

import numpy as np
import pytest

from batchlab.core.batch import FEATURE_NAMES, StepFeatures
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.cost.fitted import FittedCostModel, Shape
from batchlab.core.step_table import price
from batchlab.experiments.machine_speed import describe, machine_speed, steady_decode
from batchlab.core.model.presets import MODELS

MODEL = FittedCostModel(Shape.of(MODELS["batchlab-small"]), overhead_s=0.016, per_seq_s=2e-4,
                        per_chunk_s=5e-4, s_per_weight_byte=1 / 20e9, s_per_flop=1 / 90e9,
                        s_per_kv_byte=1 / 4e9, s_per_attn_flop=1 / 60e9, steady_s=-0.002)


def served(prompts: list[int], decodes_between: int = 12) -> list[StepFeatures]:
    """A prefill of each prompt alone, then `decodes_between` decode steps of 4 short
    sequences (contexts of a few tokens: their attention is negligible)."""
    steps = []
    for p in prompts:
        steps.append(StepFeatures(1, 1, p, 0, p, p * (p + 1) // 2, 0, 0, 0))
        for i in range(decodes_between):
            steps.append(StepFeatures(4, 0, 0, 4, 8 + 4 * i, 8 + 4 * i, int(i == 0), 0, 0))
    return steps


def table(steps: list[StepFeatures], truth, slow: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """A step table of `steps` run back to back, each lasting `truth`'s price (x slow)."""
    t = {n: np.array([getattr(f, n) for f in steps]) for n in FEATURE_NAMES}
    t["duration_s"] = np.array([truth.step_time(f) for f in steps]) * (1.0 if slow is None else slow)
    t["start_s"] = np.concatenate(([0.0], np.cumsum(t["duration_s"])[:-1]))
    t["num_preempted"] = np.zeros(len(steps), int)
    return t


def test_both_sides_are_measured_apart():
    """The memory side 20% slow while the compute side runs 10% fast: each factor is
    found on its own, and the profile at both re-prices the run's steps."""
    run = table(served([384, 512, 448, 640] * 3), MODEL.at_speed(1.2, 0.9))
    ms = machine_speed(run, MODEL, "test")
    assert ms.factor == pytest.approx(1.2, rel=2e-3)
    assert ms.compute_factor == pytest.approx(0.9, rel=1e-2) and ms.compute_steps == 12
    every = np.ones(len(run["duration_s"]), bool)
    repriced = price(run, MODEL.at_speed(ms.factor, ms.compute_factor), every)
    assert np.abs(repriced / run["duration_s"] - 1).max() < 0.01
    # the memory side alone leaves the prefills 10% over-priced
    memory_only = price(run, MODEL.at_speed(ms.factor), every)
    assert (memory_only / run["duration_s"])[run["prefill_tokens"] > 0] == pytest.approx(1 / 0.9, rel=2e-2)


def test_a_machine_far_slower_than_the_profiles_is_measured_not_dropped():
    """A shipped profile of the same setup measured on a faster CPU: every step runs 2.6x
    its price (the memory side) and 3x (the compute side). That is the run's level, not
    contention: both factors are measured and no step is dropped; a step a neighbour
    slowed 5x beyond that level still is."""
    steps = served([384, 512, 448, 640] * 3)
    steady = np.flatnonzero(steady_decode(table(steps, MODEL)))
    slow = np.ones(len(steps))
    slow[steady[:2]] = 5.0
    ms = machine_speed(table(steps, MODEL.at_speed(2.6, 3.0), slow), MODEL)
    assert ms.factor == pytest.approx(2.6, rel=2e-3) and ms.contended == 2
    assert ms.compute_factor == pytest.approx(3.0, rel=1e-2) and ms.compute_steps == 12


def test_both_sides_are_measured_under_the_gpu_form_of_a_cpu_profile():
    """A CPU profile priced by the GPU form splits its sides too (CpuFormModel.parts)."""
    from batchlab.calibration.fit.both_forms import refit
    from batchlab.core.cost.profile import load_profile
    gpu_form = refit(load_profile("batchlab-small-cpu"), "gpu").cost_model()
    run = table(served([384, 512, 448, 640] * 3), gpu_form.at_speed(1.2, 0.9))
    ms = machine_speed(run, gpu_form, "test")
    assert ms.factor == pytest.approx(1.2, rel=2e-3)
    assert ms.compute_factor == pytest.approx(0.9, rel=1e-2) and ms.compute_steps == 12


def test_a_run_without_compute_bound_steps_keeps_the_flop_rates():
    run = table(served([16, 24] * 3), MODEL.at_speed(1.1, 0.8))  # short prompts: memory-bound
    ms = machine_speed(run, MODEL)
    assert ms.factor == pytest.approx(1.1, rel=2e-3)
    assert ms.compute_factor is None and ms.compute_steps < 8 and "compute-bound" in ms.compute_why


def test_a_cost_form_without_flop_terms_measures_the_memory_side_only():
    linear = LinearCostModel(0.004, {"decode_tokens": 2e-4, "prefill_tokens": 5e-5})
    run = table(served([384, 512] * 6), linear)
    ms = machine_speed(run, linear)
    assert ms.factor is not None and ms.compute_factor is None
    assert "FLOP" in ms.compute_why


def test_the_factor_is_the_mean_step_and_contended_steps_are_left_out():
    """Calibration prices the mean served step, so the factor is total over total price:
    a run whose steady decodes run 0.95x, 0.95x, 1.4x their price in turn ran at ~1.1,
    where their median says 0.95; a step 5x its price (the core taken) is not counted."""
    steps = served([384, 512, 448, 640] * 3)
    steady = np.flatnonzero(steady_decode(table(steps, MODEL)))
    slow = np.resize([0.95, 0.95, 1.4], steady.size)
    slow[3] = 5.0
    every = np.ones(len(steps))
    every[steady] = slow
    run = table(steps, MODEL, every)
    assert (steady_decode(run) == steady_decode(table(steps, MODEL))).all()
    ms = machine_speed(run, MODEL)
    price_steady = np.array([MODEL.step_time(steps[i]) for i in steady])
    kept = slow < 5
    assert ms.steps == steady.size - 1
    assert ms.factor == pytest.approx((price_steady * slow)[kept].sum() / price_steady[kept].sum(),
                                         rel=1e-4)
    assert ms.factor > 1.08


def test_drift_within_a_run_is_measured_by_windows():
    """The machine 30% slower from the middle of the run on: the factor is the mean level,
    drift the p10-p90 of 2 s windows over it; a steady machine shows none."""
    steps = served([16, 24] * 25)
    base = table(steps, MODEL)
    assert base["start_s"][-1] > 8  # enough 2 s windows
    slow = np.where(np.arange(len(steps)) >= len(steps) // 2, 1.3, 1.0)
    ms = machine_speed(table(steps, MODEL, slow), MODEL)
    assert 1.1 < ms.factor < 1.2 and ms.drift_windows >= 4
    lo, hi = ms.drift_range
    assert lo == pytest.approx(1.0, abs=0.02) and hi == pytest.approx(1.3, abs=0.02)
    assert ms.drift == pytest.approx((hi - lo) / ms.factor, rel=1e-3)
    steady = machine_speed(base, MODEL)
    assert steady.drift == pytest.approx(0.0, abs=1e-9) and steady.drift_windows >= 4


def test_a_short_run_has_no_drift_figure():
    ms = machine_speed(table(served([16, 24]), MODEL), MODEL)
    assert ms.factor is not None and ms.drift is None and ms.drift_windows < 4


def test_the_steps_used_and_dropped_are_counted_and_said():
    steps = served([384, 512, 448, 640] * 3)
    steady = np.flatnonzero(steady_decode(table(steps, MODEL)))
    every = np.ones(len(steps))
    every[steady[:3]] = 5.0  # three contended
    ms = machine_speed(table(steps, MODEL, every), MODEL)
    assert ms.total_steps == len(steps) and ms.candidates == steady.size
    assert ms.contended == 3 and ms.steps == steady.size - 3
    text = describe(ms)
    assert text.startswith(f"{ms.steps} of {len(steps)} steps: {len(steps) - steady.size} not steady decode")
    assert "3 dropped as contended (over 2x their price at the run's fast level)" in text and "WARNING" not in text


def test_a_mostly_contended_run_warns_with_the_speed_of_every_step():
    """The issue's run: 841 of 959 steady steps dropped, the factor 1.40 on the rest while
    the run went 3.6x: the line must say so."""
    steps = served([384, 512, 448, 640] * 3)
    steady = np.flatnonzero(steady_decode(table(steps, MODEL)))
    every = np.ones(len(steps))
    every[steady] = np.where(np.arange(steady.size) % 4 == 0, 1.4, 4.0)  # 3 of 4 contended
    ms = machine_speed(table(steps, MODEL, every), MODEL)
    assert ms.factor == pytest.approx(1.4, rel=1e-3) and ms.all_factor > 3
    text = describe(ms)
    assert "WARNING: most steady decode steps were contended" in text
    assert f"together ran {ms.all_factor:.2f}x the price" in text
    assert describe(machine_speed(None, MODEL)).startswith("not measured (the run kept no step table")


def test_runs_machine_speed_line_carries_the_counts():
    from types import SimpleNamespace

    from batchlab.experiments.commands.run import labels_line

    steps = served([384, 512, 448, 640] * 3)
    ms = machine_speed(table(steps, MODEL), MODEL, "p.json")
    line = labels_line({"continuous": SimpleNamespace(machine_speed=ms)})
    assert f"[{ms.steps} of {len(steps)} steps: " in line and "0 dropped as contended" in line
