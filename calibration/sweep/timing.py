"""Timing helpers: robust statistics of repeated step times, a reference kernel to track
the machine's drifting speed, and the roofline this device measures (copy bandwidth,
matmul FLOP rate) to compare fitted rates with."""
from __future__ import annotations

import os
import time

import numpy as np
import torch

MAD_TO_SIGMA = 1.4826  # MAD of a normal sample x this = its standard deviation
OUTLIER_SIGMAS = 3.5


def robust_median(times: list[float] | np.ndarray) -> tuple[float, float, int]:
    """(median, MAD, kept) after dropping repeats more than OUTLIER_SIGMAS robust sigmas
    from the median. Bimodal CPUs put a few repeats far out; the median of the rest is
    the step time a run sees most of the time."""
    t = np.asarray(times, dtype=float)
    if t.size == 0:
        return float("nan"), float("nan"), 0
    med = float(np.median(t))
    mad = float(np.median(np.abs(t - med)))
    if mad > 0:
        t = t[np.abs(t - med) <= OUTLIER_SIGMAS * MAD_TO_SIGMA * mad]
        med = float(np.median(t))
        mad = float(np.median(np.abs(t - med)))
    return med, mad, int(t.size)


class ReferenceKernel:
    """A fixed in-cache matmul (~1-3 ms on one CPU thread), timed next to every step:
    its time tracks how fast the VM runs right now."""

    def __init__(self, device: torch.device, n: int = 384, reps: int = 3) -> None:
        self.device, self.reps = device, reps
        g = torch.Generator().manual_seed(0)
        self.a = torch.randn(n, n, generator=g).to(device)
        self.b = torch.randn(n, n, generator=g).to(device)
        self.out = torch.empty(n, n, device=device)
        self()  # first call pays for thread pools and kernel choice

    def __call__(self) -> float:
        best = []
        for _ in range(self.reps):
            t0 = time.perf_counter()
            torch.mm(self.a, self.b, out=self.out)
            _sync(self.device)
            best.append(time.perf_counter() - t0)
        return float(np.median(best))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def roofline_for(device: torch.device, dtype: torch.dtype) -> dict[str, float]:
    """The roofline a calibration compares its fitted rates with. On a GPU the matmul runs
    in the model's dtype and large enough to fill the chip: a small float32 product
    measures a few percent of a GPU's 16-bit GEMM rate
    (docs/results/2026-12-04-h200-backend-check.md)."""
    if device.type == "cuda":
        return measure_roofline(device, matmul_n=8192, matmul_dtype=dtype)
    return measure_roofline(device)


@torch.inference_mode()
def measure_roofline(device: torch.device, mib: int = 256, matmul_n: int = 1024,
                     reps: int = 5, matmul_dtype: torch.dtype = torch.float32) -> dict[str, float]:
    """Bytes/s of a large read (sum) and copy (read + write counted), float32, FLOP/s of
    an n^3 matmul in matmul_dtype: this device's roofline at the current thread count;
    and the host's load average then (other work lowers all three)."""
    n = mib * 2**20 // 4
    src = torch.ones(n, device=device)
    dst = torch.empty_like(src)
    a = torch.randn(matmul_n, matmul_n, device=device, dtype=matmul_dtype)
    b = torch.randn(matmul_n, matmul_n, device=device, dtype=matmul_dtype)

    def timed(fn) -> float:
        fn()  # untimed: page faults, kernel choice
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            _sync(device)
            ts.append(time.perf_counter() - t0)
        return float(np.median(ts))

    t_read = timed(lambda: src.sum())
    t_copy = timed(lambda: dst.copy_(src))
    t_mm = timed(lambda: torch.mm(a, b))
    nbytes = n * 4
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {"read_bandwidth": nbytes / t_read, "copy_bandwidth": 2 * nbytes / t_copy,
            "matmul_flops": 2 * matmul_n**3 / t_mm, "load_average": load}
