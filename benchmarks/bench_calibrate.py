"""The default calibration, timed: sweep batchlab-small on this machine (1 thread),
fit, and print the wall time, the fit-quality table (held-out error overall and per
region) and the fitted rates next to the roofline measured in the same run.

Target (issue 5): sweep + fit within 5 minutes on 2 CPU cores; held-out median error
at most 3%. Not a test: minutes.

    python benchmarks/bench_calibrate.py                    # default grid, batchlab-small
    python benchmarks/bench_calibrate.py --out small.json   # keep the profile (and .jsonl)
    python benchmarks/bench_calibrate.py --quick            # tiny grid on batchlab-tiny
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from batchlab.calibration import calibrate  # noqa: E402
from batchlab.calibration.sweep.grid import default_grid, tiny_grid  # noqa: E402
from batchlab.calibration.fit.report import fit_table, points_table, rates_table  # noqa: E402

TARGET_S, TARGET_MEDIAN_APE = 300.0, 3.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="batchlab-small")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help="profile path (default: a temporary file; no resume)")
    ap.add_argument("--quick", action="store_true", help="tiny grid on batchlab-tiny")
    ap.add_argument("--points", action="store_true", help="print every point's error")
    args = ap.parse_args()
    model, grid = ("batchlab-tiny", tiny_grid()) if args.quick else (args.model, default_grid())
    out = args.out or os.path.join(tempfile.mkdtemp(), "profile.json")
    if args.out and os.path.exists(out.removesuffix(".json") + ".jsonl"):
        print("note: the .jsonl next to --out exists: this run resumes, its time is not a full sweep")
    print(f"load average before: {os.getloadavg()[0]:.2f} (2 vCPUs shared with other work)")
    t0 = time.perf_counter()
    p = calibrate(model, "cpu", args.threads, out, grid, progress=sys.stderr.isatty())
    wall = time.perf_counter() - t0
    print(f"\n{p.describe()}: {len(grid.points)} grid points x {grid.rounds} rounds")
    print(f"wall time {wall:.1f} s (sweep {p.sweep_s:.1f} s), target {TARGET_S:.0f} s: "
          f"{'met' if wall <= TARGET_S else 'MISSED'}")
    med = p.fit.heldout.median_ape
    print(f"held-out median error {med:.2f}%, target {TARGET_MEDIAN_APE:.0f}%: "
          f"{'met' if med is not None and med <= TARGET_MEDIAN_APE else 'MISSED'}; "
          f"held-out max {p.fit.heldout.max_ape:.2f}%")
    if args.quick:
        print("(--quick: a smoke test of the pipeline; too few points to fit well, targets do not apply)")
    print(f"load average after: {os.getloadavg()[0]:.2f}\n")
    print(fit_table(p))
    print()
    print(rates_table(p))
    print(f"\nnotes: {p.notes}")
    if args.points:
        print()
        print(points_table(p))
    print(f"\nprofile: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
