"""How well datasheet scaling predicts one measured GPU from another (calibration/operators/
scaling.py): for every ordered pair of the GPUs with Vidur operator tables, the scaled
source's per-step error on the target's shapes beside the target's own fit's (the same
shapes left out the same way), the median measured / priced by region, and the interval a
borrowed profile carries (core/cost/gpu_profile.py SCALED_PRICE_INTERVAL). Prints markdown
(docs/results/2026-12-06-scaled-profile-interval.md).

    PYTHONPATH=. BATCHLAB_PURE=1 .venv/bin/python benchmarks/scaled_profile_interval.py \
        [../shared/gpu-profiles/vidur]"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from batchlab.calibration.operators.build import read_layers
from batchlab.calibration.operators.scaling import Measured, interval, judge_scaling
from batchlab.calibration.operators.vidur import VIDUR_GPUS
from batchlab.core.model.hardware import HARDWARE


def main(root: Path) -> None:
    t0 = time.perf_counter()
    measured = [Measured.of(HARDWARE[g], read_layers(root, v)[0]) for g, v in VIDUR_GPUS.items()
                if (root / "compute" / v).is_dir()]
    pairs = judge_scaling(measured)
    print("| source -> target | datasheet bandwidth, peak | (model, TP) judged | shapes | "
          "scaled: median abs error (p90) | own fit: median abs error (p90) | scaled priced high | measured / priced, median: decode, ridge, "
          "prefill, all |")
    print("|---|---|---|---|---|---|---|---|")
    for p in pairs:
        s, o = p.scaled["all"], p.own["all"]
        src, dst = HARDWARE[p.source], HARDWARE[p.target]
        ratios = ", ".join(f"{p.ratio[g]:.4f}" if g in p.ratio else "-" for g in ("decode", "ridge", "prefill", "all"))
        print(f"| {p.source} -> {p.target} | x{dst.mem_bandwidth / src.mem_bandwidth:.2f}, "
              f"x{dst.peak_flops / src.peak_flops:.2f} | {p.held} | {s.n} | {s.median:.1%} ({s.p90:.1%}) | "
              f"{o.median:.1%} ({o.p90:.1%}) | {s.share_high:.0%} | {ratios} |")
    lo, hi = interval(pairs)
    print(f"\ninterval: x{lo:.4f} to x{hi:.4f} of the scaled price "
          f"({len(pairs)} pairs; GEMM tiles {', '.join(f'{m.hw.name} {m.tile:g}' for m in measured)}; "
          f"{time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/gpu-profiles/vidur"))
