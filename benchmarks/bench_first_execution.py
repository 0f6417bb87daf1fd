"""What a token count costs the first time a process runs it, against the second and
third time (ratios measured in one run; the machine drifts, so no absolute targets).

    python benchmarks/bench_first_execution.py [--model batchlab-tiny] [--threads 1]

In a fresh process (this one, after the engine's warm-up), prefills of N distinct
lengths, log-spaced over --min-len..--max-len, are run three times in the same order.
Measured on the 2-vCPU AMD EPYC VM (batchlab-tiny, 1 thread, quiet, three runs): first /
second +34%, +8% and +25% at 40-128 tokens (in the +8% run second / third was 1.08 too:
noise on ~5 ms steps), +16%, +20% and +18% at 128-512, +3% beyond (about +0.7-4 ms a
step). Why the calibration's serving phase runs in a fresh process (docs/calibration.md)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from batchlab.backend.runtime import Runtime  # noqa: E402
from batchlab.core.batch import Batch  # noqa: E402
from batchlab.core.request import Request, Sequence  # noqa: E402

BANDS = ((1, 128), (128, 512), (512, 1 << 20))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="batchlab-tiny")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lengths", type=int, default=40, help="distinct prompt lengths")
    ap.add_argument("--min-len", type=int, default=40)
    ap.add_argument("--max-len", type=int, default=1800)
    args = ap.parse_args()
    rt = Runtime(args.model, threads=args.threads, kv_memory="64MiB")
    engine = rt.engine(rt.pool_blocks(None, 16), 16)
    engine.warmup()
    lens = np.unique(np.round(np.geomspace(args.min_len, args.max_len, args.lengths)).astype(int))
    times = np.zeros((3, len(lens)))
    rid = 0
    for rep in range(3):
        for i, n in enumerate(lens):
            seq = Sequence(Request(id=rid, arrival=0.0, prompt_len=int(n), output_len=1))
            seq.block_table = list(range(-(-(int(n) + 1) // 16)))
            batch = Batch()
            batch.add(seq, int(n))
            t0 = time.perf_counter()
            engine.execute(batch)
            times[rep, i] = time.perf_counter() - t0
            engine.forget(seq)
            rid += 1
    print(f"{args.model}, {rt.threads} thread(s), {len(lens)} prompt lengths {lens[0]}-{lens[-1]}, "
          f"each run 3 times in a fresh process")
    for lo, hi in BANDS:
        m = (lens >= lo) & (lens < hi)
        if m.any():
            first = np.median(times[0, m] / times[1, m])
            again = np.median(times[1, m] / times[2, m])
            extra = np.median(times[0, m] - times[1, m]) * 1e3
            print(f"  {lens[m][0]:>4}-{lens[m][-1]:<5} tokens ({m.sum():2d} lengths): first / second "
                  f"{first:.3f} (+{extra:.2f} ms), second / third {again:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
