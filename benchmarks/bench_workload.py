"""Workload layer speed and memory: load times of the shared traces, and the memory a
1,000,000-request workload needs (synthetic, and read back from a batchlab CSV).

    python benchmarks/bench_workload.py [--n 1000000]

Times are the best of 3 runs; memory is tracemalloc's peak during a separate run
(numpy reports its buffers to tracemalloc) next to the bytes the columns themselves take.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batchlab.core.workload import Workload, WorkloadConfig, build_workload, load_trace, traces_dir  # noqa: E402
from batchlab.core.workload.native import write_trace  # noqa: E402

MB = 1024 * 1024


def best_time(fn: Callable[[], object], runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def peak_mb(fn: Callable[[], object]) -> tuple[float, object]:
    tracemalloc.start()
    try:
        out = fn()
        return tracemalloc.get_traced_memory()[1] / MB, out
    finally:
        tracemalloc.stop()


def column_mb(w: Workload) -> float:
    cols = [w.arrival, w.prompt_len, w.output_len] + ([w.priority] if w.priority is not None else [])
    return sum(c.nbytes for c in cols) / MB


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="requests in the large workloads")
    n = ap.parse_args().n
    shared = traces_dir()
    print(f"trace loads (best of 3), from {shared}")
    for name in ("azure2023_conv.csv", "azure2023_code.csv", "mooncake_synthetic.jsonl",
                 "lengths/sharegpt_8k_llama2tok.csv"):
        path = shared / name
        if not path.exists():
            print(f"  {name:36} missing, skipped")
            continue
        t = best_time(lambda: load_trace(path))
        print(f"  {name:36} {len(load_trace(path)):>9} rows  {t * 1e3:7.1f} ms")

    cfg = WorkloadConfig(source="chat", num_requests=n)
    t = best_time(lambda: build_workload(cfg), runs=1)
    peak, w = peak_mb(lambda: build_workload(cfg))
    print(f"synthetic 'chat', {n} requests: {t:.2f} s, peak {peak:.0f} MB "
          f"(columns {column_mb(w):.0f} MB)")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.csv"
        t = best_time(lambda: write_trace(w, path), runs=1)
        print(f"write batchlab CSV, {n} rows: {t:.2f} s, {path.stat().st_size / MB:.0f} MB on disk")
        t = best_time(lambda: load_trace(path), runs=1)
        peak, back = peak_mb(lambda: load_trace(path))
        print(f"read batchlab CSV, {n} rows: {t:.2f} s, peak {peak:.0f} MB "
              f"(columns {column_mb(back):.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
