"""The two CPU cost forms side by side on one profile's sweep: writes OUT/NAME-fitted.json and
OUT/NAME-gpu.json (calibration/profile_forms.py refit) and prints their held-out step errors.
Judge both with `batchlab validate` (docs/results/2026-12-02-cpu-gpu-form.md):

    python benchmarks/cpu_form_ab.py batchlab-tiny-cpu out/ab
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from batchlab.calibration.profile_forms import refit  # noqa: E402
from batchlab.core.profile import load_profile  # noqa: E402


def main(name: str, out: str) -> None:
    base = load_profile(name)
    stem = Path(name).stem
    for form in ("fitted", "gpu"):
        p = refit(base, form)
        path = Path(out) / f"{stem}-{form}.json"
        p.save(path)
        q = p.fit
        print(f"{form:7s} held-out median |error| {q.heldout.median_ape}% (max {q.heldout.max_ape}%), "
              f"train {q.train.median_ape}%; by region "
              + ", ".join(f"{r} {v.median_ape}%" for r, v in q.regions.items()) + f" -> {path}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
