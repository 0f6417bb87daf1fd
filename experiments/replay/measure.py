"""One measured replay: a workload sent to --endpoint, its outcomes as a RunResult
(`batchlab replay`; the real side of `batchlab validate --endpoint`)."""
from __future__ import annotations

import argparse
import sys

from batchlab.core.workload import Workload
from batchlab.experiments.errors import UserError
from batchlab.experiments.replay.results import run_result
from batchlab.experiments.replay.sender import replay
from batchlab.experiments.replay.target import make_target


def measure(args: argparse.Namespace, workload: Workload, model: str | None, seed: int):
    """Replay `workload` against --endpoint: (RunResult, Replay, Target)."""
    if not args.time_scale >= 0 or args.time_scale == float("inf"):
        raise UserError(f"--time-scale must be a finite number >= 0, got {args.time_scale}")
    target = make_target(args.endpoint, model, args.api_key, timeout_s=args.request_timeout,
                         vocab_size=args.vocab_size, seed=seed)
    print(f"batchlab replay: {len(workload)} requests to {target.url} (model {target.model})",
          file=sys.stderr, flush=True)
    rep = replay(workload, target, time_scale=args.time_scale,
                 progress=not args.no_progress and sys.stderr.isatty())
    meta = {"endpoint": target.url, "model": target.model, "workload": workload.describe(),
            "time_scale": args.time_scale, "seed": seed, "vocab_size": target.vocab_size,
            "max_concurrency": workload.max_concurrency}
    return run_result(rep, meta), rep, target
