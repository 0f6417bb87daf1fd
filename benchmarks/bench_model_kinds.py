"""CPU a request for each kind of model, against a dense model's in the same run (issue 48
item 3: windowed and MoE models within 1.3x of a dense one).

    python benchmarks/bench_model_kinds.py [--requests N1 N2] [--pairs P] [--baseline DIR]

Each kind is `batchlab simulate` on synthetic chat requests (chunked, on the default
hardware and price) of its preset: dense (llama-3-8b), windowed (gpt-oss-20b: sliding
windows on half its layers, and MoE) and MoE (qwen3-30b-a3b). A request's CPU is (CPU at
N2 - CPU at N1) / (N2 - N1), fresh CLI processes each, so start-up cancels; every pair of
runs goes over the kinds in turn, the other way round every other pair, so that a slow
spell of the shared machine hits all alike; the medians of the pairs are printed, and each
kind's over the dense model's. The build that runs is the one PYTHONPATH (or the checkout
of this file) holds: compiled where it was built in place, pure Python under
BATCHLAB_PURE=1. --baseline DIR measures that checkout too (a before, same build kind)."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from bench_default_price import byte_compile, cli_run, machine  # beside this script

ROOT = Path(__file__).resolve().parents[1]
KINDS = {"dense (llama-3-8b)": "llama-3-8b", "windowed (gpt-oss-20b)": "gpt-oss-20b",
         "MoE (qwen3-30b-a3b)": "qwen3-30b-a3b"}
DENSE = "dense (llama-3-8b)"


def per_request(tree: Path, model: str, n1: int, n2: int) -> float:
    """CPU seconds a request: the difference of two runs, start-up cancelled."""
    extra = ["--model", model]
    return (cli_run(tree, n2, extra)[0] - cli_run(tree, n1, extra)[0]) / (n2 - n1)


def measure(tree: Path, n1: int, n2: int, pairs: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in KINDS}
    for i in range(pairs):
        for kind in (list(KINDS) if i % 2 == 0 else list(KINDS)[::-1]):
            samples[kind].append(per_request(tree, KINDS[kind], n1, n2))
    for kind, s in samples.items():
        print(f"    {kind:<26} " + " ".join(f"{c * 1e6:.1f}" for c in s) + " us a request")
    return {k: statistics.median(s) for k, s in samples.items()}


def report(name: str, cpu: dict[str, float]) -> None:
    print(f"  {name}:")
    print(f"    {'kind':<26}{'CPU us a request':>18}{'/ dense':>10}")
    for kind, c in cpu.items():
        print(f"    {kind:<26}{c * 1e6:>18.1f}{c / cpu[DENSE]:>9.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", nargs=2, type=int, default=[2_000, 20_000], metavar=("N1", "N2"),
                    help="the two run sizes whose difference is timed (default 2000 20000)")
    ap.add_argument("--pairs", type=int, default=2, help="runs of each kind and size (default 2)")
    ap.add_argument("--baseline", type=Path, help="also measure this checkout")
    args = ap.parse_args()
    n1, n2 = args.requests
    if not 0 < n1 < n2:
        raise SystemExit("--requests wants 0 < N1 < N2")
    pure = os.environ.get("BATCHLAB_PURE", "") not in ("", "0")
    trees = {"this tree": ROOT}
    if args.baseline:
        trees["baseline"] = args.baseline.resolve()
    for tree in trees.values():
        byte_compile(tree)
    print(f"machine: {machine()}; python {sys.version.split()[0]}; {'pure' if pure else 'compiled'} build")
    print(f"synthetic chat requests, chunked, no step table, default price; CPU of {n2:,} less {n1:,} "
          f"requests; {args.pairs} runs each, alternating")
    results = {}
    for name, tree in trees.items():
        print(f"  {name} ({tree}):")
        results[name] = measure(tree, n1, n2, args.pairs)
    for name, cpu in results.items():
        report(name, cpu)
    print(f"machine after the runs: {machine()}")


if __name__ == "__main__":
    main()
