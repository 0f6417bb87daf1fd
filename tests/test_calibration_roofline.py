"""The roofline a calibration measures beside its sweep: float32 on a CPU, as every CPU
profile so far; on a GPU the matmul in the model's dtype, large enough to fill the chip."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # the backend extra

from batchlab.calibration.sweep import timing


def matmul_asked(monkeypatch, device: str) -> dict:
    """The matmul size and dtype roofline_for asks measure_roofline for on `device`."""
    seen = {}

    def fake(device, mib=256, matmul_n=1024, reps=5, matmul_dtype=torch.float32):
        seen.update(n=matmul_n, dtype=matmul_dtype)
        return {}
    monkeypatch.setattr(timing, "measure_roofline", fake)
    timing.roofline_for(torch.device(device), torch.bfloat16)
    return seen


def test_cpu_roofline_stays_float32(monkeypatch):
    assert matmul_asked(monkeypatch, "cpu") == {"n": 1024, "dtype": torch.float32}


def test_gpu_roofline_multiplies_in_the_models_dtype(monkeypatch):
    seen = matmul_asked(monkeypatch, "cuda")
    assert seen["dtype"] == torch.bfloat16 and seen["n"] >= 4096


def test_matmul_runs_in_the_dtype_asked_for(monkeypatch):
    dtypes, mm = [], torch.mm

    def recording(a, b, **kw):
        dtypes.append(a.dtype)
        return mm(a, b, **kw)
    monkeypatch.setattr(torch, "mm", recording)
    roof = timing.measure_roofline(torch.device("cpu"), mib=4, matmul_n=64, reps=1,
                                   matmul_dtype=torch.bfloat16)
    assert dtypes and set(dtypes) == {torch.bfloat16}
    assert roof["read_bandwidth"] > 0 and roof["copy_bandwidth"] > 0 and roof["matmul_flops"] > 0
