"""The designed probe workloads of `batchlab calibrate --endpoint URL`: a bounded set, each
sent to the server, kept as a batchlab replay folder, read back through the replay reader,
fitted and judged (the sending is the command's: experiments/calibrate/endpoint.py).

The probes tell the cost terms apart (each varies one thing the others hold):
- batch-N: N requests at once, short prompt, 32 tokens out (N = 1, 4, seats-bounded 16):
  decode steps at several batch sizes -> fixed cost, per sequence, weight streaming vs FLOPs;
- prompt: one request at a time, prompts of 64 .. --probe-max-prompt tokens, 4 out:
  TTFT against prompt length -> matmul FLOPs, attention pairs, per chunk;
- context: 4 requests at once with the longest prompt, 32 out: decode over a long KV ->
  the KV read term;
- sparse: 16 short prompts (16-256 tokens, 16 out) SPARSE_GAP_S apart, each to an idle
  server: the short prefills after idle a light workload is made of (without them the fit
  priced those at 0.66-0.71 of real and taught the front end the rest:
  docs/results/2026-12-06-engineers-loop.md);
- load-a, load-b: the same Poisson mix of lengths sent twice: load-a is fitted on, load-b
  is judged (held out) and the pair gives the server's own run-to-run spread;
- load-fast: another load and shape (twice the rate, replies twice as long), judged only.
All told: about 125 requests, none longer than --probe-max-prompt + 128 tokens."""
from __future__ import annotations

import numpy as np

from batchlab.core.workload.workload import Workload

HELD = ("load-b", "load-fast")
# Probe k sends prompts seeded base + 1 + k (the warm-up: base): none shares a prefix.
OUT_LEN = 32
SPARSE_GAP_S = 0.5  # apart: a short request ends well within it on a CPU
# Sent one at a time before the probes, not recorded: a short and a longer prompt.
WARMUP = Workload(np.zeros(3), np.array([32, 256, 32]), np.array([8, 8, 8]), description=["warm-up"],
                  max_concurrency=1)


def design(max_prompt: int, seats: int, seed: int = 0) -> list[tuple[str, Workload]]:
    """(name, workload) of each probe, in the order sent."""
    rng = np.random.default_rng(seed)
    out: list[tuple[str, Workload]] = []

    def wl(name, arrival, prompt, output, conc=None):
        out.append((name, Workload(np.asarray(arrival, float), np.asarray(prompt), np.asarray(output),
                                   description=[f"probe {name}"], max_concurrency=conc)))

    for n in sorted({1, min(4, seats), min(16, seats)}):
        wl(f"batch-{n}", [0.0] * n, [32] * n, [OUT_LEN] * n)
    lens = [p for p in (64, 256, 1024, 2048) if p <= max_prompt] or [max_prompt]
    prompts = [p for p in lens for _ in range(2)]
    wl("prompt", [0.0] * len(prompts), prompts, [4] * len(prompts), conc=1)
    wl("context", [0.0] * 4, [max(lens)] * 4, [OUT_LEN] * 4)
    short = min(256, max(lens))
    sparse = np.random.default_rng([seed, 1])  # its own draws: the load probes' stay as they were
    wl("sparse", SPARSE_GAP_S * np.arange(16), sparse.integers(min(16, short), short + 1, 16), [16] * 16)
    n = 24
    arrival = np.cumsum(rng.exponential(0.25, n))
    prompt = rng.integers(16, max(lens) + 1, n)
    output = rng.integers(8, 2 * OUT_LEN + 1, n)
    for name in ("load-a", "load-b"):
        wl(name, arrival - arrival[0], prompt, output)
    fast = np.cumsum(rng.exponential(0.125, n))
    wl("load-fast", fast - fast[0], rng.integers(16, max(lens) + 1, n), rng.integers(2 * OUT_LEN, 4 * OUT_LEN + 1, n))
    return out
