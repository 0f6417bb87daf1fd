"""What the paging study and its --backend variant share (both import this module; neither
imports the other's): the 2 x 2 grid of batching (static, continuous) and KV allocation
(reserved at admission, paged), the workloads, and the figures measured from a run."""
from __future__ import annotations

import numpy as np

from batchlab.core.config import SchedulerConfig
from batchlab.core.kv import blocks_for
from batchlab.core.result import RunResult
from batchlab.core.workload import Workload

NAME = "paging"
BATCHING = ("static", "continuous")
ALLOCATION = ("reserved", "paged")
GRID = [(b, a) for b in BATCHING for a in ALLOCATION]
COLUMNS = ("world", "batching", "kv_allocation", "mean_concurrency", "max_concurrency",
           "output_throughput", "median_ttft_ms", "p99_ttft_ms", "preemptions",
           "kv_utilization", "kv_reserved", "completed", "duration")


def label(batching: str, allocation: str) -> str:
    return f"{batching}+{allocation}"


def scheduler(batching: str, allocation: str, seats: int, block_size: int, blocks: int) -> SchedulerConfig:
    return SchedulerConfig(policy=batching, kv_allocation=allocation, max_num_seqs=seats,
                           block_size=block_size, num_kv_blocks=blocks)


def workload(n: int, prompt: tuple[int, int], output: tuple[int, int], users: int | None,
             seed: int = 0) -> Workload:
    """n requests of uniform prompt and output lengths; `users` in a closed loop (None:
    all at t=0, so that no decision depends on how long a step took)."""
    rng = np.random.default_rng(seed)
    p, o = rng.integers(prompt[0], prompt[1] + 1, n), rng.integers(output[0], output[1] + 1, n)
    how = f"closed loop: {users} users" if users else "all at t=0"
    return Workload(np.zeros(n), p, o, max_concurrency=users,
                    description=[f"{n} requests, prompts {prompt[0]}-{prompt[1]} tokens, outputs "
                                 f"{output[0]}-{output[1]} tokens, seed {seed}; {how}"])


def reserved_share(res: RunResult, block_size: int, blocks: int) -> float:
    """Time-weighted mean share of the pool reserved by admitted requests' whole budgets
    (prompt + output - 1 tokens), from each one's first schedule to its finish: what
    reserved allocation holds (it never preempts, so a request holds its budget once)."""
    req = res.requests
    done = req["status"] == "finished"
    budget = np.array([blocks_for(int(p + o - 1), block_size)
                       for p, o in zip(req["prompt_len"][done], req["output_len"][done])])
    held = (req["finish_s"][done] - req["first_scheduled_s"][done]) * budget
    st = res.steps
    span = float(st["start_s"][-1] + st["duration_s"][-1] - st["start_s"][0])
    return float(held.sum() / (span * blocks)) if span > 0 else float("nan")


def measure(world: str, batching: str, allocation: str, res: RunResult, block_size: int,
            blocks: int) -> dict:
    """The study's figures. Concurrency: sequences in a decode-only step (every running
    sequence decodes in one), mean and peak: how many sequences fit at once."""
    s, st = res.summary(), res.steps
    decode = st["prefill_tokens"] == 0
    k = st["num_seqs"][decode]
    return {"world": world, "batching": batching, "kv_allocation": allocation,
            "mean_concurrency": float(k.mean()) if k.size else float("nan"),
            "max_concurrency": int(k.max()) if k.size else 0,
            **{c: s[c] for c in ("output_throughput", "median_ttft_ms", "p99_ttft_ms", "preemptions",
                                 "kv_utilization", "completed", "duration")},
            "kv_reserved": reserved_share(res, block_size, blocks) if allocation == "reserved" else float("nan")}
