"""The backend's fast path against its reference path, in one run on one machine:

  1. batch-1 decode against the memory-copy floor (weight bytes a step streams / measured
     copy bandwidth), for both paths;
  2. decode steps over a grid of batch sizes and contexts, and two prefill steps (a fresh
     chunk, and a later chunk that reads earlier blocks), fast / reference.

The two paths share the model's weights and one KV pool; their steps alternate, so that
a load that comes and goes on a shared machine falls on both alike. Medians of each
path's steps; ratios are what to read (the absolute times depend on the load, printed).
Compiling the fast path's kernels happens first (seconds per shape), outside the clock.

    python benchmarks/bench_fast_path.py                  # batchlab-small, the full grid
    python benchmarks/bench_fast_path.py --quick          # batchlab-tiny, a small grid
    python benchmarks/bench_fast_path.py --fast paged     # attention only, eager elementwise
    python benchmarks/bench_fast_path.py --fast paged,fuse  # without the one-row decode
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import itertools
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from batchlab.backend.engine import Engine  # noqa: E402
from batchlab.backend.fast.options import FastPath  # noqa: E402
from batchlab.backend.kv_cache import PagedKVCache  # noqa: E402
from batchlab.backend.model_runner import ModelRunner  # noqa: E402
from batchlab.backend.models import build_preset  # noqa: E402
from batchlab.core.batch import Batch  # noqa: E402
from batchlab.core.request import Request, Sequence  # noqa: E402
from bench_backend import copy_bandwidth  # noqa: E402  beside this script: the same copy floor

BS = 16
GRID = [(1, 128), (1, 1024), (4, 512), (8, 128), (8, 1024), (16, 512), (32, 256), (32, 1024), (64, 128),
        (64, 512)]
QUICK_GRID = [(1, 128), (4, 512), (16, 256), (64, 128)]
PREFILLS = [(0, 512), (512, 256)]  # (start, tokens): a fresh chunk, a later chunk
_IDS = itertools.count()  # request ids: an engine keeps prompt ids per id


def _turns(engines: dict[str, Engine], rep: int) -> list[tuple[str, Engine]]:
    """The engines in turn, the order rotated every round (A B C, B C A, C A B, ...):
    going first or last in a round is worth a few percent on a busy machine."""
    items = list(engines.items())
    k = rep % len(items)
    return items[k:] + items[:k]


def batch1_against_floor(engines: dict[str, Engine], weights: int, steps: int) -> dict[str, float]:
    """Per path, the median of floor / step over rounds that time a copy moving the
    weights' bytes (weights/2 read + weights/2 written: the floor at the copy bandwidth)
    next to each path's one-sequence decode step at context 128; also in this thread's CPU
    time (k_cpu: the copy's and the step's, each without the time the thread waited for a
    core, which on an oversubscribed machine swamps wall-clock ratios)."""
    src = torch.ones(weights // 8)
    dst = torch.empty_like(src)
    ratios: dict[str, list[float]] = {k: [] for k in engines}
    cpu: dict[str, list[float]] = {k: [] for k in engines}
    floors, cpu_floors = [], []
    for rep in range(steps + 2):
        c0, t0 = time.thread_time(), time.perf_counter()
        dst.copy_(src)
        floor, cpu_floor = time.perf_counter() - t0, time.thread_time() - c0
        for name, eng in _turns(engines, rep):
            b, seqs = decode_batch(1, 128)
            c0 = time.thread_time()
            dt = eng.execute(b)
            dc = time.thread_time() - c0
            for s in seqs:
                eng.forget(s)
            if rep >= 2:
                ratios[name].append(floor / dt)
                cpu[name].append(cpu_floor / dc)
        floors.append(floor)
        cpu_floors.append(cpu_floor)
    out = {k: float(np.median(v)) for k, v in ratios.items()}
    out |= {f"{k}_cpu": float(np.median(v)) for k, v in cpu.items()}
    out["floor_s"] = float(np.median(floors[2:]))
    out["cpu_floor_s"] = float(np.median(cpu_floors[2:]))
    return out


def decode_batch(batch: int, context: int) -> tuple[Batch, list[Sequence]]:
    """`batch` sequences decoding at `context` tokens of KV, blocks interleaved in the pool."""
    nblk = -(-(context + 1) // BS)
    seqs = []
    for i in range(batch):
        seq = Sequence(Request(next(_IDS), 0.0, context, 10**6))
        seq.num_generated, seq.output_token_ids, seq.num_computed = 1, [1], context
        seq.block_table = [j * batch + i for j in range(nblk)]
        seqs.append(seq)
    b = Batch()
    for s in seqs:
        b.add(s, 1)
    return b, seqs


def prefill_batch(start: int, n: int) -> tuple[Batch, list[Sequence]]:
    seq = Sequence(Request(next(_IDS), 0.0, start + n, 10**6))
    seq.num_computed = start
    seq.block_table = list(range(-(-(start + n) // BS)))
    b = Batch()
    b.add(seq, n)
    return b, [seq]


def time_steps(engines: dict[str, Engine], make, steps: int) -> dict[str, float]:
    """Median step seconds per engine, their steps alternating, and "ratio": the median
    of fast / reference over adjacent pairs (a load that drifts cancels in each pair).
    The rounds' order rotates (_turns)."""
    times: dict[str, list[float]] = {k: [] for k in engines}
    for rep in range(steps + 2):
        for name, eng in _turns(engines, rep):
            b, seqs = make()
            dt = eng.execute(b)
            for s in seqs:
                eng.forget(s)
            if rep >= 2:  # the first two: warm-up (and compiles on the fast path)
                times[name].append(dt)
    out = {k: float(np.median(v)) for k, v in times.items()}
    out["ratio"] = float(np.median(np.array(times["fast"]) / np.array(times["reference"])))
    if "general" in times:
        out["general_ratio"] = float(np.median(np.array(times["fast"]) / np.array(times["general"])))
    if "control" in times:
        out["control_ratio"] = float(np.median(np.array(times["control"]) / np.array(times["reference"])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="batchlab-small")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=12, help="timed steps per point and path")
    ap.add_argument("--fast", default="paged,fuse,onerow",
                    help="the fast path's parts: paged, fuse, onerow (the one-row decode)")
    ap.add_argument("--quick", action="store_true", help="batchlab-tiny and a small grid")
    ap.add_argument("--inplace-min-mib", type=float,
                    help="decode attends in place from this many MiB gathered a layer (default: the runner's)")
    ap.add_argument("--inplace-prefill", action="store_true", help="later prefill chunks in place too")
    ap.add_argument("--fuse-min-rows", type=int, help="fused elementwise from this many rows")
    ap.add_argument("--batch1", action="store_true",
                    help="only batch 1: the floor and the grid's one-sequence points (a loaded machine)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.quick:
        args.model = "batchlab-tiny"
    torch.set_num_threads(args.threads)
    parts = set(args.fast.split(","))
    fast = FastPath("paged" if "paged" in parts else "gather", fuse="fuse" in parts, one_row="onerow" in parts)
    grid = QUICK_GRID if args.quick else GRID
    grid = [(b, c) for b, c in grid if b == 1] if args.batch1 else grid
    model = build_preset(args.model, seed=0)
    # control: a second reference runner, built last (its own packed weights): control /
    # reference is what the same code measures against itself here (an A/A test)
    runners = {"reference": ModelRunner(model.hf), "fast": ModelRunner(model.hf, fast=fast),
               "control": ModelRunner(model.hf)}
    if fast.one_row:
        # general: the fast runner itself (the same packed weights) with the one-row decode
        # off; where a runner's weights sit in memory moved its step by up to 40% here
        general = copy.copy(runners["fast"])
        general.fast, general._one_row = dataclasses.replace(fast, one_row=False), None
        runners["general"] = general
    if args.inplace_min_mib is not None:
        runners["fast"].inplace_min_bytes = int(args.inplace_min_mib * 2**20)
    runners["fast"].inplace_prefill |= args.inplace_prefill
    if args.fuse_min_rows is not None and runners["fast"].fused is not None:
        runners["fast"].fused.min_rows = args.fuse_min_rows
    tokens = max(max(b * (c + 1 + BS) for b, c in grid), sum(PREFILLS[-1]) + BS)
    cache = PagedKVCache(model.spec, -(-tokens // BS), BS, device="cpu")
    engines = {k: Engine(r, cache) for k, r in runners.items()}
    load = os.getloadavg()
    print(f"model {args.model} ({model.spec.params / 1e6:.0f}M params, float32), cpu threads "
          f"{args.threads}, torch {torch.__version__}; fast path: {fast.label()}; decode in place "
          f"from {runners['fast'].inplace_min_bytes / 2**20:g} MiB gathered a layer, prefill "
          f"{'in place' if runners['fast'].inplace_prefill else 'gathered'}"
          + (f", fused from {runners['fast'].fused.min_rows} rows" if runners["fast"].fused else ""))
    print(f"KV pool {cache.num_blocks} blocks of {BS}; load average at start "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    bw = copy_bandwidth()
    weights = runners["reference"].weight_bytes_per_step
    floor = weights / bw
    rows = []
    t_all = time.perf_counter()
    b1 = time_steps(engines, lambda: decode_batch(1, 128), args.steps * 2)
    fl = batch1_against_floor(engines, weights, args.steps * 2)
    print(f"\nbatch-1 decode (context 128): floor {floor * 1e3:.1f} ms = {weights / 2**20:.0f} MiB of "
          f"weights / {bw / 1e9:.1f} GB/s copy bandwidth (best of 5 at the start)")
    for k in [k for k in engines if k != "control"]:
        print(f"  {k:>9}: {b1[k] * 1e3:7.2f} ms -> {floor / b1[k]:.0%} of the floor's speed; "
              f"{fl[k]:.0%} against a copy of the weights' bytes timed next to each step "
              f"(median {fl['floor_s'] * 1e3:.1f} ms)")
    print(f"  in CPU time (the thread's, not waiting for a core; copy median "
          f"{fl['cpu_floor_s'] * 1e3:.1f} ms): " + ", ".join(f"{k} {fl[k + '_cpu']:.0%}" for k in engines))
    print(f"  fast / reference, median of adjacent pairs: {b1['ratio']:.2f} (control / reference "
          f"{b1['control_ratio']:.2f})")
    if "general_ratio" in b1:
        print(f"  fast / general (the same weights, one-row decode off), median of adjacent pairs: "
              f"{b1['general_ratio']:.2f}")
    print(f"\n{'step':>22} {'reference ms':>13} {'fast ms':>9} {'fast/ref':>9} {'control/ref':>12}"
          f"  (medians of pairs)")
    points = [(f"decode {b:>3} x {c:>4}", lambda b=b, c=c: decode_batch(b, c)) for b, c in grid]
    points += [] if args.batch1 else [(f"prefill {n} at {s}", lambda s=s, n=n: prefill_batch(s, n))
                                      for s, n in PREFILLS]
    for label, make in points:
        t = time_steps(engines, make, args.steps)
        ratio = t["ratio"]
        rows.append({"step": label.strip(), "reference_s": t["reference"], "fast_s": t["fast"], "ratio": ratio,
                     "control_ratio": t["control_ratio"]})
        print(f"{label:>22} {t['reference'] * 1e3:13.2f} {t['fast'] * 1e3:9.2f} {ratio:9.2f} "
              f"{t['control_ratio']:12.2f}", flush=True)
    load = os.getloadavg()
    print(f"\n{time.perf_counter() - t_all:.0f} s; load average at the end {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}; worst fast/ref {max(r['ratio'] for r in rows):.2f}; control/ref "
          f"{min(r['control_ratio'] for r in rows):.2f}-{max(r['control_ratio'] for r in rows):.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "threads": args.threads, "fast": fast.label(),
                       "copy_bandwidth": bw, "weight_bytes": weights, "floor_s": floor,
                       "batch1_s": b1, "batch1_paired_floor": fl, "grid": rows}, f, indent=2)


if __name__ == "__main__":
    main()
