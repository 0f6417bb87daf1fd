"""Render docs/results/NAME.md from studies' output folders (each with the study.json that
`batchlab experiment NAME` writes): the study's report, dated, naming the machine and the
command. Measure on a quiet machine, then render:

    batchlab experiment all --out out/experiments
    python benchmarks/results_page.py out/experiments/*      # -> docs/results/NAME.md
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from batchlab.experiments.studies.results_page import write_page

DOCS = Path(__file__).resolve().parents[1] / "docs" / "results"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dirs", nargs="+", metavar="DIR", help="a study's output folder (holds study.json)")
    p.add_argument("--to", metavar="DIR", type=Path, default=DOCS, help=f"where pages go (default {DOCS})")
    args = p.parse_args(argv)
    for d in args.dirs:
        try:
            print(write_page(Path(d), args.to))
        except (ValueError, KeyError) as e:
            print(f"results_page: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
