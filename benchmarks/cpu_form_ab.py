"""The two CPU cost forms side by side on one profile's sweep: writes OUT/NAME-fitted.json and
OUT/NAME-gpu.json (calibration/fit/both_forms.py refit) and prints their held-out step errors.
Judge both with `batchlab validate` (docs/results/2026-12-02-cpu-gpu-form.md), then set
their `validate --real --out` judgements side by side:

    python benchmarks/cpu_form_ab.py batchlab-tiny-cpu out/ab
    python benchmarks/cpu_form_ab.py --compare out/ab/rejudge-fitted out/ab/rejudge-gpu
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from batchlab.calibration.fit.both_forms import refit  # noqa: E402
from batchlab.core.cost.profile import load_profile


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


KEYS = ("mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p90_tpot_ms")


def compare(*dirs: str) -> None:
    """Per policy and metric: the real runs' median and spread, then each judgement's
    simulated value and error (signed %; normalised to each run's machine speed in brackets)."""
    docs = [json.loads((Path(d) / "rejudged.json").read_text()) for d in dirs]
    print("policy      metric           real ms  spread  " + "  ".join(f"{Path(d).name:>30}" for d in dirs))
    for cells in zip(*(doc["cells"] for doc in docs)):
        rows = [{m["key"]: m for m in c["metrics"]} for c in cells]
        for k in KEYS:
            if k not in rows[0]:
                continue
            r = rows[0][k]
            print(f"{cells[0]['policy']:<11} {k:<15} {r['spread']['median']:9.1f} {r['spread']['range']:6.1%}  "
                  + "  ".join(f"{row[k]['sim']:7.1f} ms {row[k]['error']:+7.1%} ({row[k]['error_normalised']:+7.1%})"
                              for row in rows))
    for d, doc in zip(dirs, docs):
        s = doc["per_step"]
        print(f"{Path(d).name}: per-step median |error| {s['median_ape']:.1%} (real-real {s['real_vs_real']:.1%}, "
              f"{s['steps']} steps); at one level for the runs (x{s['level_median']:.2f}) {s['median_ape_at_median']:.1%}")


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        compare(*sys.argv[2:])
    else:
        main(*sys.argv[1:3])
