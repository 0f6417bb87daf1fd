"""Issue 45 on a GPU, in one short run: the backend's fast path (paged attention read in
place, fused elementwise, CUDA graphs for decode steps) against its reference path.

1. Exactness: one workload served by the shared scheduler on the reference path, the
   fast path without graphs, and with graphs; greedy outputs compared token for token,
   and the logits of one mixed step (decodes + a later prefill chunk) against the
   reference's.
2. Timing: decode steps over batch sizes at one context, each path's steps alternating:
   wall time per step; for graphs on and off the kernels' time a step (torch.profiler)
   and the bound: the weights' and the step's KV bytes at the GPU's measured copy
   bandwidth.
Each part runs under its own guard: a failure prints one line and the rest goes on.
Run by engine_check.sh; figures go to --out (engine.json, engine.txt). A dry run of the
plumbing on a CPU (no graphs there):
    python benchmarks/gpu/engine_check.py --device cpu --model batchlab-tiny --dtype float32 \
        --kv 256MiB --requests 4 --batches 1 4 --context 128 --steps 2 --out /tmp/engine_dry"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_fast_path import decode_batch, time_steps  # noqa: E402
from batchlab.backend.driver import run_workload  # noqa: E402
from batchlab.backend.device import resolve_dtype, synchronize  # noqa: E402
from batchlab.backend.engine import Engine  # noqa: E402
from batchlab.backend.fast.options import FastPath  # noqa: E402
from batchlab.backend.kv_cache import PagedKVCache  # noqa: E402
from batchlab.backend.model_runner import ModelRunner  # noqa: E402
from batchlab.backend.models import load_model  # noqa: E402
from batchlab.backend.runtime import Runtime  # noqa: E402
from batchlab.core.config import SchedulerConfig  # noqa: E402
from batchlab.core.workload import Workload  # noqa: E402

PATHS = {"reference": FastPath(), "fast": FastPath("paged", True, False), "graphs": FastPath("paged", True, True)}


def guarded(label: str, results: dict, fn) -> None:
    t0 = time.perf_counter()
    try:
        results[label] = fn()
        print(f"[{label}] done in {time.perf_counter() - t0:.0f} s", flush=True)
    except Exception as e:  # noqa: BLE001: one part failing must not lose the others
        line = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        results[label] = {"error": line}
        print(f"[{label}] FAILED after {time.perf_counter() - t0:.0f} s: {line}", flush=True)
        traceback.print_exc(limit=6)


def paths(args) -> dict[str, FastPath]:
    return PATHS if args.device != "cpu" else {k: v for k, v in PATHS.items() if not v.cuda_graphs}


def exactness(model, args) -> dict:
    rng = np.random.default_rng(0)
    n = args.requests
    w = Workload(arrival=np.zeros(n), prompt_len=rng.integers(16, 400, n), output_len=rng.integers(8, 48, n))
    outs = {}
    for name, fast in paths(args).items():
        rt = Runtime(loaded=model, keep_hf=True, device=args.device, dtype=args.dtype, kv_memory=args.kv, fast=fast)
        out: dict[int, list[int]] = {}
        t0 = time.perf_counter()
        run_workload(rt, w, SchedulerConfig(policy="chunked", max_num_batched_tokens=512, block_size=args.bs),
                     time_scale=0.0, progress=False, outputs=out)
        outs[name] = out
        print(f"  served {n} requests on the {name} path in {time.perf_counter() - t0:.0f} s", flush=True)
        del rt
        if args.device != "cpu":
            torch.cuda.empty_cache()
    ref = outs["reference"]
    res = {}
    for name in [k for k in outs if k != "reference"]:
        same = sum(outs[name][i] == ref[i] for i in ref)
        first = [next((j for j, (a, b) in enumerate(zip(outs[name][i], ref[i])) if a != b), None) for i in ref]
        res[name] = {"identical_requests": same, "requests": len(ref),
                     "first_divergence": [f for f in first if f is not None][:10]}
        print(f"  {name}: greedy outputs identical for {same}/{len(ref)} requests", flush=True)
    return res


def mixed_step_logits(model, args) -> dict:
    dev = torch.device(args.device)
    runners = {k: ModelRunner(model.hf, fast=PATHS[k]) for k in ("reference", "fast")}
    cache = PagedKVCache(model.spec, 256, args.bs, runners["reference"].dtype, dev)
    torch.manual_seed(1)
    cache.pool.normal_()
    per = -(-700 // args.bs)
    tables = [list(range(i * per, (i + 1) * per)) for i in range(4)]
    decodes = [(100, tables[0]), (300, tables[1]), (650, tables[2])]
    prefills = [(200, 128, tables[3])]
    ids = torch.randint(0, model.spec.vocab_size, (3 + 128,), device=dev)
    pos = torch.cat([torch.tensor([100, 300, 650]), torch.arange(200, 328)]).to(dev)
    sample = torch.tensor([0, 1, 2, 130], device=dev)
    saved = cache.pool.clone()
    got = {}
    for k, r in runners.items():
        cache.pool.copy_(saved)
        got[k] = r.forward(ids, pos, r.metadata(decodes, prefills, cache), cache, sample, 650)
    diff = (got["fast"] - got["reference"]).abs().max().item()
    scale = got["reference"].abs().max().item()
    same = bool(torch.equal(got["fast"].argmax(-1), got["reference"].argmax(-1)))
    print(f"  logits: max |fast - reference| {diff:.4g} of max |logit| {scale:.4g}; argmax equal: {same}")
    return {"max_abs_diff": diff, "max_abs_logit": scale, "argmax_equal": same}


def copy_bandwidth(dev: torch.device) -> float:
    src = torch.ones(1 << 28, device=dev, dtype=torch.float32)  # 1 GiB
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(5):
        synchronize(dev)
        t0 = time.perf_counter()
        dst.copy_(src)
        synchronize(dev)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() * 4 / best


def kernel_seconds(eng: Engine, make, steps: int = 5) -> float:
    """GPU time in kernels a step: the profiler's CUDA events, summed (as kernel_times.py)."""
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=acts) as prof:
        for _ in range(steps):
            b, seqs = make()
            eng.execute(b)
            for s in seqs:
                eng.forget(s)
    total = sum(e.time_range.elapsed_us() for e in prof.events()
                if e.device_type == torch.autograd.DeviceType.CUDA)
    return total * 1e-6 / steps


def timing(model, args) -> dict:
    dev = torch.device(args.device)
    bw = copy_bandwidth(dev)
    runners = {k: ModelRunner(model.hf, fast=f) for k, f in paths(args).items()}
    top = max(args.batches)
    cache = PagedKVCache(model.spec, top * -(-(args.context + 1) // args.bs) + 8, args.bs,
                         runners["reference"].dtype, dev)
    engines = {k: Engine(r, cache) for k, r in runners.items()}
    weights = runners["reference"].weight_bytes_per_step
    kv_token = 2 * model.spec.num_layers * model.spec.num_kv_heads * model.spec.head_dim * cache.pool.element_size()
    rows = []
    print(f"  copy bandwidth {bw / 1e12:.2f} TB/s; weights {weights / 2**30:.2f} GiB")
    for b in args.batches:
        make = (lambda b=b: decode_batch(b, args.context))
        t = time_steps({k: engines[k] for k in ("reference", "fast")}, make, args.steps)
        graphs = engines.get("graphs", engines["fast"])  # a CPU dry run has none
        g = time_steps({"reference": engines["reference"], "fast": graphs}, make, args.steps)
        k_fast = kernel_seconds(engines["fast"], make)
        k_graph = kernel_seconds(graphs, make)
        bound = (weights + b * (args.context + 1) * kv_token) / bw
        row = {"batch": b, "context": args.context, "reference_s": t["reference"], "fast_s": t["fast"],
               "graphs_s": g["fast"], "kernels_fast_s": k_fast, "kernels_graphs_s": k_graph, "bound_s": bound}
        rows.append(row)
        print(f"  decode {b:>3} x {args.context}: reference {t['reference'] * 1e3:.2f} ms, fast {t['fast'] * 1e3:.2f}, "
              f"graphs {g['fast'] * 1e3:.2f}; kernels {k_fast * 1e3:.2f} / {k_graph * 1e3:.2f}; "
              f"bound {bound * 1e3:.2f} -> graphs/kernels {g['fast'] / max(k_graph, 1e-9):.2f}, kernels/bound "
              f"{k_graph / bound:.2f}" if k_graph else "", flush=True)
    return {"copy_bandwidth": bw, "weight_bytes": weights, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="benchmarks/gpu/llama-3-8b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--kv", default="16GiB")
    ap.add_argument("--bs", type=int, default=16, help="KV block size")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32, 128])
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--parts", default="logits,exactness,timing")
    ap.add_argument("--out", default="out/engine_check")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    model = load_model(args.model, resolve_dtype(args.dtype), args.device, 0)
    gpu = torch.cuda.get_device_name() if args.device != "cpu" else "cpu"
    print(f"{args.model} loaded in {time.perf_counter() - t0:.0f} s on {gpu}; "
          f"torch {torch.__version__}; KV block {args.bs}", flush=True)
    results: dict = {"model": args.model, "dtype": args.dtype, "block_size": args.bs,
                     "gpu": gpu, "torch": torch.__version__}
    parts = args.parts.split(",")
    if "logits" in parts:
        guarded("logits", results, lambda: mixed_step_logits(model, args))
    if "exactness" in parts:
        guarded("exactness", results, lambda: exactness(model, args))
    if "timing" in parts:
        guarded("timing", results, lambda: timing(model, args))
    with open(os.path.join(args.out, "engine.json"), "w") as f:
        json.dump(results, f, indent=2)
    print(f"engine_check: {time.perf_counter() - t0:.0f} s in all; {args.out}/engine.json")


if __name__ == "__main__":
    main()
