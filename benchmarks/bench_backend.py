"""Serve one workload on the same model and CPU three ways and compare output tokens/s:

  1. batchlab's engine (shared scheduler, paged KV, one unpadded forward per step),
  2. transformers' continuous batching (generate_batch's manager, per-request lengths),
  3. transformers' static `generate` on padded batches (prompts left-padded to the
     longest, every member decoding to the longest output of its batch).

Then batch-1 decode: batchlab's step time against the memory-bandwidth floor (weight
bytes streamed per step / measured copy bandwidth). Not a test: minutes, not seconds.

    python benchmarks/bench_backend.py                      # 64 requests, batchlab-small
    python benchmarks/bench_backend.py --quick              # 16 requests, batchlab-tiny
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from batchlab.backend.driver import run_workload  # noqa: E402
from batchlab.backend.engine import synthetic_prompt  # noqa: E402
from batchlab.backend.models import build_preset  # noqa: E402
from batchlab.backend.runtime import Runtime  # noqa: E402
from batchlab.core.batch import Batch  # noqa: E402
from batchlab.core.config import SchedulerConfig  # noqa: E402
from batchlab.core.request import Request, Sequence  # noqa: E402
from batchlab.core.workload import Workload  # noqa: E402


def make_workload(n: int, prompt: tuple[int, int], output: tuple[int, int], seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    what = f"{n} requests at t=0, prompts U{list(prompt)}, outputs U{list(output)}, seed {seed}"
    return Workload(arrival=np.zeros(n), prompt_len=rng.integers(prompt[0], prompt[1] + 1, n),
                    output_len=rng.integers(output[0], output[1] + 1, n), description=[what])


def prompts_of(w: Workload, vocab: int) -> list[list[int]]:
    return [synthetic_prompt(i, int(w.prompt_len[i]), vocab).tolist() for i in range(len(w))]


def bench_batchlab(rt: Runtime, w: Workload, policy: str, seats: int) -> tuple[float, dict]:
    out: dict[int, list[int]] = {}
    cfg = SchedulerConfig(policy=policy, max_num_seqs=seats)
    res = run_workload(rt, w, cfg, time_scale=0.0, progress=False, outputs=out)
    s = res.summary()
    assert s["completed"] == len(w)
    # all arrive at 0: the duration is first arrival to last finish, on the wall clock
    return s["total_output_tokens"] / s["duration"], out


def bench_generate_batch(hf, w: Workload, prompts: list[list[int]], seats: int, block_size: int,
                         kv_tokens: int, batch_tokens: int) -> tuple[float, dict]:
    from transformers import ContinuousBatchingConfig, GenerationConfig
    gen = GenerationConfig(do_sample=False, eos_token_id=None, pad_token_id=0,
                           max_new_tokens=int(w.output_len.max()))
    cb = ContinuousBatchingConfig(num_blocks=kv_tokens // block_size, page_size=block_size,
                                  max_batch_tokens=batch_tokens, max_requests_per_batch=seats)
    out: dict[int, list[int]] = {}
    t0 = time.perf_counter()
    with hf.continuous_batching_context_manager(generation_config=gen, continuous_batching_config=cb,
                                                block=True, timeout=5) as mgr:
        for i, p in enumerate(prompts):
            mgr.add_request(p, request_id=str(i), max_new_tokens=int(w.output_len[i]))
        while len(out) < len(prompts):
            r = mgr.get_result(timeout=1)
            if r is not None and r.is_finished():
                out[int(r.request_id)] = list(r.generated_tokens)
            elif r is None and not mgr.is_running():
                raise RuntimeError("generate_batch's manager stopped")
    dt = time.perf_counter() - t0
    return sum(len(v) for v in out.values()) / dt, out


def bench_static(hf, w: Workload, prompts: list[list[int]], batch: int) -> float:
    """Useful output tokens (each request's own length) per second of padded batches."""
    t0 = time.perf_counter()
    with torch.inference_mode():
        for a in range(0, len(prompts), batch):
            group = prompts[a:a + batch]
            width = max(len(p) for p in group)
            ids = torch.tensor([[0] * (width - len(p)) + p for p in group])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in group])
            new = int(w.output_len[a:a + batch].max())
            hf.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=new, pad_token_id=0)
    return int(w.output_len.sum()) / (time.perf_counter() - t0)


def copy_bandwidth(nbytes: int = 512 * 2**20, repeats: int = 5) -> float:
    """STREAM-style copy: bytes read + written per second, best of a few."""
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best


def batch1_step(rt: Runtime, context: int = 128, steps: int = 30) -> float:
    """Median seconds of a one-sequence decode step at `context` tokens of KV."""
    bs = 16
    eng = rt.engine(rt.kv_blocks(bs), bs)
    seq = Sequence(Request(0, 0.0, context, steps + 1))
    seq.num_generated, seq.output_token_ids, seq.num_computed = 1, [1], context
    seq.block_table = list(range(-(-(context + 1) // bs)))
    times = []
    for _ in range(steps + 3):
        b = Batch()
        b.add(seq, 1)
        del seq.output_token_ids[1:]
        times.append(eng.execute(b))
    return float(np.median(times[3:]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="batchlab-small")
    ap.add_argument("--num-requests", type=int, default=64)
    ap.add_argument("--prompt", type=int, nargs=2, default=(32, 512), metavar=("MIN", "MAX"))
    ap.add_argument("--output", type=int, nargs=2, default=(16, 256), metavar=("MIN", "MAX"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seats", type=int, default=64, help="max sequences per step (both engines)")
    ap.add_argument("--policy", default="continuous", help="batchlab's scheduler")
    ap.add_argument("--static-batch", type=int, default=16, help="padded batch size of `generate`")
    ap.add_argument("--hf-batch-tokens", type=int, default=8192,
                    help="generate_batch's max_batch_tokens (8192: batchlab continuous's budget)")
    ap.add_argument("--skip", nargs="*", default=[], choices=["generate_batch", "static"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="batchlab-tiny, 16 requests")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.quick:
        args.model, args.num_requests = "batchlab-tiny", 16
    torch.set_num_threads(args.threads)
    w = make_workload(args.num_requests, tuple(args.prompt), tuple(args.output), args.seed)
    model = build_preset(args.model, seed=args.seed)
    kv_tokens = int((w.prompt_len + w.output_len).sum()) + 64 * 16  # room for everyone: no preemption
    rt = Runtime(loaded=model, keep_hf=True, threads=args.threads,
                 kv_memory=kv_tokens * model.spec.kv_bytes_per_token)
    hf = model.hf
    prompts = prompts_of(w, model.spec.vocab_size)
    print(f"model {args.model} ({model.spec.params / 1e6:.0f}M params, float32), cpu threads {args.threads}, "
          f"torch {torch.__version__}")
    print(f"workload: {w.describe()}; {int(w.prompt_len.sum())} prompt + "
          f"{int(w.output_len.sum())} output tokens")
    rt.engine(rt.kv_blocks(16), 16).warmup()  # first-touch of the pool and kernels
    tps: dict[str, float] = {}
    t0 = time.perf_counter()
    tps["batchlab"], ours = bench_batchlab(rt, w, args.policy, args.seats)
    print(f"  batchlab ({args.policy:>10}):        {tps['batchlab']:8.1f} output tok/s "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    agree = None
    if "generate_batch" not in args.skip:
        t0 = time.perf_counter()
        tps["generate_batch"], theirs = bench_generate_batch(hf, w, prompts, args.seats, 16, kv_tokens,
                                                             args.hf_batch_tokens)
        agree = sum(ours[i] == theirs.get(i) for i in ours) / len(ours)
        print(f"  transformers generate_batch:    {tps['generate_batch']:8.1f} output tok/s "
              f"({time.perf_counter() - t0:.0f} s); greedy outputs identical for {agree:.0%} "
              f"of requests", flush=True)
    if "static" not in args.skip:
        t0 = time.perf_counter()
        tps["static_generate"] = bench_static(hf, w, prompts, args.static_batch)
        print(f"  transformers generate (padded batches of {args.static_batch}): "
              f"{tps['static_generate']:8.1f} useful output tok/s ({time.perf_counter() - t0:.0f} s)",
              flush=True)
    for peer in ("generate_batch", "static_generate"):
        if peer in tps:
            print(f"  batchlab / {peer}: {tps['batchlab'] / tps[peer]:.2f}x")
    bw = copy_bandwidth()
    step = batch1_step(rt)
    weights = rt.runner.weight_bytes_per_step
    floor = weights / bw
    print(f"batch-1 decode step (context 128): {step * 1e3:.1f} ms; floor {floor * 1e3:.1f} ms "
          f"= {weights / 2**20:.0f} MiB of weights / {bw / 1e9:.1f} GB/s copy bandwidth "
          f"-> {floor / step:.0%} of the floor's speed")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "threads": args.threads, "workload": w.describe(),
                       "output_tok_s": tps, "greedy_agreement": agree,
                       "batch1_step_s": step, "bandwidth_floor_s": floor, "copy_bandwidth": bw,
                       "weight_bytes": weights}, f, indent=2)


if __name__ == "__main__":
    main()
