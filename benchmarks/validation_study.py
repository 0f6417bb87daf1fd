"""The validation study of docs/validation.md: every workload x policy x load cell run on
the CPU backend and in the simulator; writes study.csv, study.json, cells/*.json and
report.md into --out.

    python benchmarks/validation_study.py --out out/validation            # ~40 min
    python benchmarks/validation_study.py --profile P.json --only chat    # a subset
    python benchmarks/validation_study.py --scale 0.1 --out /tmp/smoke    # smoke test
    python benchmarks/validation_study.py --report-only --out out/validation
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from batchlab.experiments.validation import study
from batchlab.experiments.validation.study_report import render


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="out/validation", help="output folder")
    p.add_argument("--profile", help="calibration profile; default: calibrate first (saved in --out)")
    p.add_argument("--only", nargs="*", help="cells (chat-light), workloads (chat) or loads (light)")
    p.add_argument("--no-spread", action="store_true", help="skip the repeated real runs")
    p.add_argument("--scale", type=float, default=1.0, help="multiply request counts (smoke tests)")
    p.add_argument("--report-only", action="store_true", help="re-render report.md from study.json")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.report_only:
        result = study.load_result(out)
    else:
        result = study.run_study(out, args.profile, args.only, set() if args.no_spread else study.SPREAD,
                                 args.scale, say=lambda m: print(m, file=sys.stderr, flush=True))
    render(result).write(out / "report.md")
    print(f"{out / 'report.md'} ({result['elapsed_s'] / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
