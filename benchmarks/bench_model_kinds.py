"""CPU a request for each kind of model, against a dense model's in the same run (issue 48
item 3: windowed and MoE models within 1.3x of a dense one).

    python benchmarks/bench_model_kinds.py [--requests N1 N2] [--pairs P] [--baseline DIR]
    python benchmarks/bench_model_kinds.py --instructions N1 N2 [--baseline DIR]

Each kind is `batchlab simulate` on synthetic chat requests (chunked, on the default
hardware and price) of its preset: dense (llama-3-8b), windowed (gpt-oss-20b: sliding
windows on half its layers, and MoE) and MoE (qwen3-30b-a3b). A request's CPU is (CPU at
N2 - CPU at N1) / (N2 - N1), fresh CLI processes each, so start-up cancels; every pair of
runs goes over the kinds in turn, the other way round every other pair, so that a slow
spell of the shared machine hits all alike; the medians of the pairs are printed, and each
kind's over the dense model's. The build that runs is the one PYTHONPATH (or the checkout
of this file) holds: compiled where it was built in place, pure Python under
BATCHLAB_PURE=1. --baseline DIR measures that checkout too (a before, same build kind).

--instructions N1 N2: instead, the instructions a request costs under valgrind's cachegrind
(bench_default_price.py counts them the same way): the same in every run, where the
shared machine's CPU seconds move by tens of percent between runs minutes apart."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from bench_default_price import byte_compile, cli_instructions, cli_run, machine  # beside this script

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


def instructions(tree: Path, n1: int, n2: int) -> dict[str, float]:
    return {kind: (cli_instructions(tree, n2, ["--model", model]) - cli_instructions(tree, n1, ["--model", model]))
            / (n2 - n1) for kind, model in KINDS.items()}


def report(name: str, cost: dict[str, float], unit: str = "CPU us a request", scale: float = 1e6) -> None:
    print(f"  {name}:")
    print(f"    {'kind':<26}{unit:>24}{'/ dense':>10}")
    for kind, c in cost.items():
        print(f"    {kind:<26}{c * scale:>24,.1f}{c / cost[DENSE]:>9.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", nargs=2, type=int, default=[2_000, 20_000], metavar=("N1", "N2"),
                    help="the two run sizes whose difference is timed (default 2000 20000)")
    ap.add_argument("--pairs", type=int, default=2, help="runs of each kind and size (default 2)")
    ap.add_argument("--baseline", type=Path, help="also measure this checkout")
    ap.add_argument("--instructions", nargs=2, type=int, metavar=("N1", "N2"),
                    help="count instructions a request under valgrind instead (e.g. 1000 4000)")
    args = ap.parse_args()
    n1, n2 = args.instructions or args.requests
    if not 0 < n1 < n2:
        raise SystemExit("--requests wants 0 < N1 < N2")
    pure = os.environ.get("BATCHLAB_PURE", "") not in ("", "0")
    trees = {"this tree": ROOT}
    if args.baseline:
        trees["baseline"] = args.baseline.resolve()
    for tree in trees.values():
        byte_compile(tree)
    print(f"machine: {machine()}; python {sys.version.split()[0]}; {'pure' if pure else 'compiled'} build")
    if args.instructions:
        print(f"synthetic chat requests, chunked, no step table, default price; instructions of {n2:,} "
              f"less {n1:,} requests, under cachegrind")
        for name, tree in trees.items():
            report(name, instructions(tree, n1, n2), "instructions a request", 1.0)
        return
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
