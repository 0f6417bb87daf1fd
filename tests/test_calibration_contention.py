"""Calibration on a contended machine is refused with the reason, never a crash and never
a non-physical profile (calibration/sweep/contention.py)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")  # calibration's sweep times the backend

from batchlab.calibration.sweep import run as calibration_run  # noqa: E402
from batchlab.calibration.sweep.contention import ContendedCalibration, check_prices, check_served, contended_share  # noqa: E402
from batchlab.calibration.fit.fitted_form import FitResult  # noqa: E402
from batchlab.calibration.sweep.grid import tiny_grid  # noqa: E402
from batchlab.calibration.sweep.serve_phase import workload  # noqa: E402
from batchlab.core.features import StepFeatures  # noqa: E402
from batchlab.core.cost.fitted import FittedCostModel, Shape
from batchlab.core.model.presets import MODELS

SHAPE = Shape.of(MODELS["batchlab-tiny"])
GOOD = FittedCostModel(SHAPE, overhead_s=0.002, per_seq_s=1e-5, per_chunk_s=1e-4, s_per_weight_byte=1 / 20e9,
                       s_per_flop=1 / 90e9, s_per_kv_byte=1 / 4e9, s_per_attn_flop=1 / 60e9)
# what a contaminated sweep fitted: a one-row correction far below the overhead
BAD = FittedCostModel(SHAPE, overhead_s=0.002, per_seq_s=1e-5, per_chunk_s=1e-4, s_per_weight_byte=1 / 20e9,
                      s_per_flop=1 / 90e9, s_per_kv_byte=1 / 4e9, s_per_attn_flop=1 / 60e9,
                      small_rows=(-0.01, 0.01))
DECODE1 = StepFeatures(1, 0, 0, 1, 10, 10)


def test_a_non_physical_price_is_refused_with_the_reason():
    assert BAD.step_time(DECODE1) < 0
    check_prices(GOOD, [DECODE1], "the sweep's fit")
    with pytest.raises(ContendedCalibration, match=r"the sweep's fit prices 1 of 1 steps at or below 0 s") as e:
        check_prices(BAD, [DECODE1], "the sweep's fit")
    assert "contaminated by other work" in str(e.value) and "\n" not in str(e.value)


def test_the_serving_phase_sizes_no_traffic_from_negative_prices():
    """Where `ValueError: scale < 0` came from: a rate from a negative mean price."""
    with pytest.raises(ContendedCalibration, match="at or below 0 s"):
        workload(BAD, 64, 3.0)
    assert len(workload(GOOD, 64, 3.0)) >= 12


def test_a_mostly_contended_serving_phase_is_refused():
    feats = [StepFeatures(2, 0, 0, 2, 20 + i, 20 + i) for i in range(40)]
    price = np.array([GOOD.step_time(f) for f in feats])
    quiet = price * 1.1
    noisy = price * np.where(np.arange(40) % 5 < 2, 3.0, 1.1)  # 40% over 2x
    assert contended_share(GOOD, feats, quiet) == 0 and contended_share(GOOD, feats, noisy) == pytest.approx(0.4)
    check_served(GOOD, feats, quiet)
    with pytest.raises(ContendedCalibration, match=r"40% of its 40 steps took over 2x the sweep's price"):
        check_served(GOOD, feats, noisy)


@pytest.mark.parametrize("load, idle", [(0.7, True), (12.0, False)])
def test_a_refusal_says_whether_other_work_shows_and_how_to_keep(monkeypatch, load, idle):
    """On a 16-CPU GPU host at load 0.7 the served steps' spread is the engine's own, not
    a neighbour's: the refusal says so; either way it names the option that keeps it."""
    from batchlab.calibration.sweep import contention
    monkeypatch.setattr(contention.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(contention.os, "cpu_count", lambda: 16)
    feats = [StepFeatures(2, 0, 0, 2, 20 + i, 20 + i) for i in range(40)]
    noisy = np.array([GOOD.step_time(f) for f in feats]) * 3.0
    with pytest.raises(ContendedCalibration) as e:
        check_served(GOOD, feats, noisy)
    msg = str(e.value)
    assert msg.endswith("--on-contention keep keeps such a phase") and "\n" not in msg
    assert ("no other work shows in the load average" in msg) == idle


def test_calibrate_writes_no_profile_from_a_non_physical_sweep(tmp_path, monkeypatch):
    real_fit = calibration_run.fit

    def contaminated(*args, **kw):
        r = real_fit(*args, **kw)
        return FitResult(BAD, r.quality, r.train_mean_ape)

    monkeypatch.setattr(calibration_run, "fit", contaminated)
    out = tmp_path / "p.json"
    grid = tiny_grid()
    with pytest.raises(ContendedCalibration, match="the sweep's fit prices"):
        calibration_run.calibrate("batchlab-tiny", "cpu", 1, out, grid, kv_memory="16MiB", progress=False,
                                  log=lambda msg: None)
    assert not out.exists()


def test_a_contended_serving_phase_is_served_again_once_and_kept_if_asked(tmp_path, monkeypatch):
    """The first serving refused (stood in for), the second served for real and contended
    too (its share of steps over 2x their price forced to 60%): with keep, the profile is
    written, warning in the log and in its notes."""
    from batchlab.calibration.sweep import contention
    real_serve, calls, said = calibration_run.serve, [], []

    def once_contended(*args, **kw):
        calls.append((args[-1], kw.get("strict", True)))  # the seed, and whether it may refuse
        if len(calls) == 1:
            raise ContendedCalibration("the serving phase was contended: 60% of its 90 steps took over 2x")
        return real_serve(*args, **kw)

    monkeypatch.setattr(calibration_run, "serve", once_contended)
    monkeypatch.setattr(contention, "contended_share", lambda *a: 0.6)
    out = tmp_path / "p.json"
    p = calibration_run.calibrate("batchlab-tiny", "cpu", 1, out, tiny_grid(), kv_memory="16MiB",
                                  progress=False, log=said.append, on_contention="keep")
    assert calls == [(0, True), (1, False)] and p.serving["steps"] > 0 and out.exists()
    assert any("60% of its 90 steps" in s and "serving again once" in s for s in said)
    assert p.serving["contended_share"] == 0.6
    assert any(s.startswith("calibrate: warning: the serving phase was contended again: 60%") for s in said), said
    assert "WARNING: the serving phase was contended again" in p.notes


def test_a_serving_phase_contended_twice_is_refused_by_default(tmp_path, monkeypatch):
    """refuse (the default, whatever the suite's environment says): the second serving is
    strict, its refusal ends the calibration, nothing is written. (The serving itself is
    stood in for: what is tested is what calibrate asks of it and does with its answer.)"""
    asked = []

    def contended(*args, strict=True, **kw):
        asked.append(strict)
        raise ContendedCalibration("the serving phase was contended: 60% of its 90 steps took over 2x")

    monkeypatch.setattr(calibration_run, "serve", contended)
    monkeypatch.delenv("BATCHLAB_ON_CONTENTION")
    out = tmp_path / "p.json"
    with pytest.raises(ContendedCalibration, match="60% of its 90 steps"):
        calibration_run.calibrate("batchlab-tiny", "cpu", 1, out, tiny_grid(), kv_memory="16MiB",
                                  progress=False, log=lambda m: None)
    assert asked == [True, True] and not out.exists()


def test_an_unknown_contention_mode_is_one_line(monkeypatch):
    from batchlab.calibration.sweep.on_contention import on_contention_mode
    monkeypatch.setenv("BATCHLAB_ON_CONTENTION", "ignore")
    with pytest.raises(ValueError, match="BATCHLAB_ON_CONTENTION is 'ignore'; expected one of refuse, keep"):
        on_contention_mode()
    assert on_contention_mode("refuse") == "refuse"
