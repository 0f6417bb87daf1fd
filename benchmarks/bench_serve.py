"""The HTTP layer's cost: output tokens/s of `batchlab serve` + `batchlab replay` against
`batchlab run` on the same workload, the same model, scheduler and seats, measured in one
run of this script, printed as a ratio (serve / run; 1.0 means HTTP costs nothing).

Each side runs as its own process, as a user runs them: `run` is one process; serve and
replay are two (the server's engine thread, its HTTP thread and the client all compete
for the same cores, which is part of the cost on a small machine). Rounds alternate so
drift on a shared machine hits both sides alike; the medians are compared.

    python benchmarks/bench_serve.py                 # 3 rounds, 128 requests at once
    python benchmarks/bench_serve.py --rounds 1 --num-requests 64
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.serve_helpers import ServeProcess, batchlab  # noqa: E402


def workload_args(n: int, concurrency: int | None) -> list[str]:
    # uniform preset scaled by 8: 64-token prompts, 16-token replies.
    w = ["--workload", "uniform", "--num-requests", str(n), "--length-scale", "8", "--seed", "1"]
    return w + (["--max-concurrency", str(concurrency)] if concurrency else ["--rate", "inf"])


def run_side(n: int, seats: int, concurrency: int | None) -> float:
    p = batchlab("run", *workload_args(n, concurrency), "--model", "batchlab-tiny",
                 "--max-num-seqs", str(seats), "--format", "json", "--no-progress", timeout=900)
    if p.returncode:
        raise SystemExit(f"batchlab run failed: {p.stderr}")
    return json.loads(p.stdout)["continuous"]["output_throughput"]


def serve_side(n: int, seats: int, concurrency: int | None, tmp: Path, k: int) -> float:
    srv = ServeProcess("--model", "batchlab-tiny", "--max-num-seqs", str(seats), out=tmp / f"serve{k}")
    try:
        srv.wait_ready()
        p = batchlab("replay", "--endpoint", srv.base, *workload_args(n, concurrency),
                     "--format", "json", "--no-progress", timeout=900)
        if p.returncode:
            raise SystemExit(f"batchlab replay failed: {p.stderr}")
        return json.loads(p.stdout)["replay"]["output_throughput"]
    finally:
        srv.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--num-requests", type=int, default=128)
    ap.add_argument("--seats", type=int, default=64)
    ap.add_argument("--max-concurrency", type=int, default=None,
                    help="closed loop of N users instead of all requests at once")
    a = ap.parse_args()
    runs, serves = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.rounds):
            runs.append(run_side(a.num_requests, a.seats, a.max_concurrency))
            serves.append(serve_side(a.num_requests, a.seats, a.max_concurrency, Path(tmp), k))
            print(f"round {k + 1}: run {runs[-1]:.0f} tok/s, serve+replay {serves[-1]:.0f} tok/s "
                  f"(ratio {serves[-1] / runs[-1]:.3f})", flush=True)
    r, s = statistics.median(runs), statistics.median(serves)
    print(f"\nbatchlab-tiny, {a.num_requests} requests (64-token prompts, 16-token replies), "
          f"{a.seats} seats, {'rate inf' if not a.max_concurrency else f'{a.max_concurrency} users'}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"output tokens/s, median of {a.rounds}: batchlab run {r:.0f}, serve+replay {s:.0f}; "
          f"ratio serve/run {s / r:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
