"""Calibration on a contended machine is refused with the reason, never a crash and never
a non-physical profile (calibration/contention.py)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")  # calibration's sweep times the backend

from batchlab.calibration import run as calibration_run  # noqa: E402
from batchlab.calibration.contention import ContendedCalibration, check_prices, check_served, contended_share  # noqa: E402
from batchlab.calibration.fit import FitResult  # noqa: E402
from batchlab.calibration.grid import tiny_grid  # noqa: E402
from batchlab.calibration.serve_phase import workload  # noqa: E402
from batchlab.core.features import StepFeatures  # noqa: E402
from batchlab.core.fitted_cost import FittedCostModel, Shape  # noqa: E402
from batchlab.core.specs import MODELS  # noqa: E402

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


def test_a_contended_serving_phase_is_served_again_once_with_the_reason(tmp_path, monkeypatch):
    real_serve, calls, said = calibration_run.serve, [], []

    def once_contended(*args, **kw):
        calls.append(args[-1])  # the seed
        if len(calls) == 1:
            raise ContendedCalibration("the serving phase was contended: 60% of its 90 steps took over 2x")
        return real_serve(*args, **kw)

    monkeypatch.setattr(calibration_run, "serve", once_contended)
    p = calibration_run.calibrate("batchlab-tiny", "cpu", 1, tmp_path / "p.json", tiny_grid(), kv_memory="16MiB",
                                  progress=False, log=said.append)
    assert calls == [0, 1] and p.serving["steps"] > 0
    assert any("60% of its 90 steps" in s and "serving again once" in s for s in said)
