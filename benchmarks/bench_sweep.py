"""Sweep speed: one 200-point sweep over the Azure conv trace, run serially, on a local
process pool of every core, and on a Dask LocalCluster of 2 workers, in one run;
results must be identical, and the ratios against serial are printed.

    python benchmarks/bench_sweep.py [--quick] [--window S]

The grid: 2 policies x 5 seat counts x 5 rate scales x 4 GPU presets (Llama-3-8B,
roofline), each point one simulation of the trace's first --window seconds (default
1200 s, ~6,600 requests). Points are independent, so the ceiling is the number of
cores (2x on two); the pool and the cluster pay for starting workers and shipping
each point. On a shared machine compare the ratios, not the seconds. --quick runs 20
points."""
from __future__ import annotations

import argparse
import contextlib
import filecmp
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batchlab.experiments.cli import main  # noqa: E402
from batchlab.experiments.executor import cores  # noqa: E402

GRID = """
[workload]
source = "azure_conv"
window_duration_s = {window}
[model]
name = "llama-3-8b"
[run.slo]
ttft_ms = 1000.0
tpot_ms = 60.0
[grid]
policy = ["continuous", "chunked"]
max_num_seqs = {seats}
rate_scale = {scales}
hardware = {hardware}
"""


def grid(window: float, quick: bool) -> str:
    if quick:  # 2 x 2 x 5 x 1 = 20
        return GRID.format(window=window, seats=[64, 256], scales=[0.5, 1.0, 1.5, 2.0, 3.0],
                           hardware='["a100-80gb"]')
    return GRID.format(window=window, seats=[32, 64, 128, 256, 512], scales=[0.5, 1.0, 1.5, 2.0, 3.0],
                       hardware='["a100-80gb", "h100-sxm", "h200", "l4"]')


def timed(args: list[str]) -> float:
    t0 = time.perf_counter()
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):  # the tables
        code = main(args)
    if code != 0:
        raise SystemExit(f"batchlab {' '.join(args)} exited {code}")
    return time.perf_counter() - t0


def main_() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20 points instead of 200")
    ap.add_argument("--window", type=float, default=1200.0, help="seconds of the trace per point")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "grid.toml").write_text(grid(a.window, a.quick))
        cfg = ["sweep", "--config", str(t / "grid.toml")]
        runs = {"serial": ["--workers", "1"], f"pool ({cores()} workers)": [],
                "Dask LocalCluster (2 workers)": ["--dask", "local", "--workers", "2"]}
        secs = {}
        for i, (name, extra) in enumerate(runs.items()):
            secs[name] = timed([*cfg, "--out", str(t / f"r{i}"), *extra])
            print(f"{name}: {secs[name]:.1f} s", file=sys.stderr)
        same = all(filecmp.cmp(t / "r0" / "results.csv", t / f"r{i}" / "results.csv", shallow=False)
                   for i in range(1, len(runs)))
        points = sum(1 for _ in open(t / "r0" / "results.csv")) - 1
    base = secs["serial"]
    print(f"\n{points}-point sweep over azure_conv (first {a.window:g} s), {cores()} cores")
    print(f"{'executor':32} {'wall s':>8} {'points/s':>9} {'vs serial':>10}")
    for name, s in secs.items():
        print(f"{name:32} {s:8.1f} {points / s:9.2f} {base / s:9.2f}x")
    print(f"results identical across executors: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main_()
