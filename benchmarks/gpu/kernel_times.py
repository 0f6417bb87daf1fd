"""The GPU time of batchlab's backend steps, kernel by kernel (torch.profiler), beside their
wall time: on a GPU an eager step can be bound by the host launching its kernels, and its
wall time then says little about the kernels the GPU profile prices. Writes one JSON
(kernel_times.json) that compare_kernels.py prices with the GPU profile of public data.

    python benchmarks/gpu/kernel_times.py --model DIR --device cuda --out OUT [--extra]

For every point of calibration's default grid (and, with --extra, longer prefills and
larger decode batches): the median wall time of REPS steps, then REPS steps under the
profiler, whose kernels are summed per step by kind (GEMM, attention, KV gather/write,
copies, other elementwise). Then runs of one prefill shape with the garbage collector on
and off, then alternating with another shape (as the sweep times), with the allocator's
cudaMalloc count and the host's time by op, for the slow steps the wall times show."""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from batchlab.backend.runtime import Runtime
from batchlab.calibration.sweep.grid import (GridPoint, blocks_needed, build_batch, default_grid,
                                       release_batch, reset_batch)
from batchlab.core.atomic import write_text
from batchlab.core.kv import BlockManager

REPS = 5
PROBE = GridPoint(chunk=128)
OTHER = GridPoint(16, 512)  # the shape the probe alternates with
EXTRA = [GridPoint(chunk=c) for c in (1024, 2048, 4096)] + [
    GridPoint(b, c) for b, c in ((128, 512), (256, 512), (128, 1024))]


def kind(name: str) -> str:
    n = name.lower()
    if "memcpy" in n or "memset" in n:
        return "copy"
    if any(k in n for k in ("gemm", "cutlass", "xmma", "nvjet", "cublas", "splitk", "gemv")):
        return "gemm"
    if any(k in n for k in ("flash", "fmha", "attention", "efficient", "softmax")):
        return "attention"
    if any(k in n for k in ("index", "gather", "scatter")):
        return "kv_gather"
    return "elementwise"


def step_kernels(engine, batch, device, reps: int) -> tuple[dict[str, float], int]:
    """Seconds of GPU kernels a step, by kind, and kernels a step."""
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        timed(engine, batch, reps)
    by: dict[str, float] = {}
    count = 0
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        by[kind(e.name)] = by.get(kind(e.name), 0.0) + e.time_range.elapsed_us() * 1e-6 / reps
        count += 1
    return by, count // reps


def timed(engine, batch, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        out.append(engine.execute(batch))
        reset_batch(batch)
    return out


def done(engine, batch, kv) -> None:
    for seq in batch.seqs:
        engine.forget(seq)  # request ids restart at 0 in every point's batch
    release_batch(batch, kv)


def mallocs(device) -> int:
    if device.type != "cuda":
        return 0
    return int(torch.cuda.memory_stats(device).get("segment.all.allocated", 0))


def probe_runs(engine, kv, device) -> dict:
    """The slow steps the calibration's wall times show: one prefill shape many times, the
    collector on and then off, then alternating with another shape (as the sweep times
    them); the allocator's cudaMalloc count; the host's time by op."""
    batch = build_batch(PROBE, kv)
    timed(engine, batch, 3)
    runs = {}
    for label, collect in (("gc_on", True), ("gc_off", False)):
        (gc.enable if collect else gc.disable)()
        before = mallocs(device)
        runs[label] = {"wall_s": timed(engine, batch, 40), "mallocs": mallocs(device) - before}
    gc.enable()
    other = build_batch(OTHER, kv)
    before, alternate = mallocs(device), []
    for _ in range(20):
        timed(engine, other, 1)
        alternate += timed(engine, batch, 1)
    runs["alternating"] = {"wall_s": alternate, "mallocs": mallocs(device) - before}
    done(engine, other, kv)
    for label, r in runs.items():
        w = sorted(r["wall_s"])
        print(f"{PROBE.key} x{len(w)} {label}: median {statistics.median(w) * 1e3:.1f} ms, "
              f"min {w[0] * 1e3:.1f}, max {w[-1] * 1e3:.1f}, over 2x the min: "
              f"{sum(x > 2 * w[0] for x in w)}, cudaMallocs {r['mallocs']}", flush=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:  # where the host's time goes
        host = timed(engine, batch, 20)
    top = sorted(prof.key_averages(), key=lambda a: -a.self_cpu_time_total)[:15]
    runs["host_top"] = {"wall_s": host, "ops": [(a.key, a.count, a.self_cpu_time_total * 1e-6 / 20)
                                                for a in top]}
    print("host time a step, by op (self):", ", ".join(
        f"{a.key} x{a.count // 20} {a.self_cpu_time_total * 1e-3 / 20:.2f} ms" for a in top[:8]))
    done(engine, batch, kv)
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--kv-memory", default="24GiB")
    ap.add_argument("--out", required=True)
    ap.add_argument("--extra", action="store_true", help="also longer prefills, larger decode batches")
    ap.add_argument("--regions", default="decode,prefill,mixed", help="the grid's regions to time")
    ap.add_argument("--profiled-reps", type=int, default=REPS, help="steps under the profiler a point")
    ap.add_argument("--limit", type=int, default=0, help="first N points only (a dry run)")
    args = ap.parse_args()
    regions = args.regions.split(",")
    points = [p for p in default_grid().points if p.region in regions][:args.limit or None]
    points += EXTRA if args.extra else []
    rt = Runtime(args.model, dtype=args.dtype, device=args.device, threads=1, kv_memory=args.kv_memory)
    engine = rt.engine(blocks_needed(points + [PROBE, OTHER], 16), 16)
    engine.warmup()
    kv = BlockManager(engine.cache.num_blocks, engine.cache.block_size)
    info = {"model": rt.meta().model, "device": str(rt.device),
            "gpu": torch.cuda.get_device_name(rt.device) if rt.device.type == "cuda" else None,
            "torch": torch.__version__, "profiled_reps": args.profiled_reps, "probe": PROBE.key,
            "runs": probe_runs(engine, kv, rt.device), "points": []}
    path = os.path.join(args.out, "kernel_times.json")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    for i, p in enumerate(points):
        batch = build_batch(p, kv)
        timed(engine, batch, 2)  # warm: kernel choice, allocator growth for this shape
        before = mallocs(rt.device)
        wall = timed(engine, batch, 2 * REPS)
        kernels, count = step_kernels(engine, batch, rt.device, args.profiled_reps)
        done(engine, batch, kv)
        info["points"].append({"key": p.key, "wall_s": statistics.median(wall), "wall_min_s": min(wall),
                               "wall_max_s": max(wall), "kernels_s": kernels, "kernels_per_step": count,
                               "mallocs": mallocs(rt.device) - before})
        write_text(path, json.dumps(info, indent=1))  # a run cut short keeps its points
        print(f"{i + 1}/{len(points)} {p.key}: wall {statistics.median(wall) * 1e3:.2f} ms, kernels "
              f"{sum(kernels.values()) * 1e3:.2f} ms ({count} a step), {time.perf_counter() - t0:.0f} s",
              flush=True)


if __name__ == "__main__":
    main()
