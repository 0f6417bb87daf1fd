"""A served-engine fit's report: its constants, what the rows did not tell, and its error
on rows left out of the fit (by model, TP degree, concurrency), beside the fit's own."""
from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np

from batchlab.calibration.fit.calibrated import Calibrated
from batchlab.calibration.served_bench.client import DEFAULT_CLIENT as RECORDED_CLIENT
from batchlab.calibration.served_bench.fit import HeldOut, ServedFit
from batchlab.calibration.served_bench.judge import Predicted, Spread
from batchlab.core.cost.served.engine import VLLM
from batchlab.core.cost.served.terms import PRIORS
from batchlab.core.cost.served.profile import HeldOutStats, ServedProfile


def _stats(by: str, left_out: str, rows: list[Predicted], fold: ServedFit | None = None) -> HeldOutStats:
    s, t = Spread.of([p.tpot_error for p in rows]), Spread.of([p.ttft_error for p in rows])
    terms = {n: float(getattr(fold.terms, n)) for n in fold.terms.names()} if fold else {}
    return HeldOutStats(by=by, left_out=left_out, rows=s.n, tpot_median_pct=round(100 * s.median, 2),
                        tpot_p90_pct=round(100 * s.p90, 2), slow_share=round(s.slow_share, 3),
                        ttft_median_pct=round(100 * t.median, 2), ttft_p90_pct=round(100 * t.p90, 2), terms=terms)


def served_profile(f: ServedFit, held: list[HeldOut], source: Path) -> ServedProfile:
    return ServedProfile(
        engine=VLLM.name, engine_source=VLLM.source,
        terms={n: float(getattr(f.terms, n)) for n in f.terms.names()},
        fitted_on=f"{source} ({len(f.rows)} configurations)", rms_log=round(f.rms_log, 4), at_bound=f.at_bound,
        held=f.held,
        heldout=[_stats(h.by, h.left_out, h.judged, h.fit) for h in held],
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))


def _note(name: str, f: ServedFit) -> str:
    if name in f.held:
        prior = PRIORS.get(name)
        return f"  (held at its prior: {prior.source if prior else 'the eager tables rate, no row runs bf16'})"
    if name in f.at_bound:
        return "  (at its bound: not told by these rows)"
    if name not in f.spread:
        return ""
    spread = f"  +-x{f.spread[name]:.2f}"
    if name in f.flat:
        return "  (no row's price moves with it here: the efficiency it scales is at the datasheet's ceiling, " \
               "or no row takes its path)"
    if name in f.untold:
        return spread + "  (the rows say next to nothing of it)"
    partners = [b if a == name else a for a, b, _ in f.together if name in (a, b)]
    return spread + (f"  (told only with {', '.join(partners)})" if partners else "")


def served_report(f: ServedFit, held: list[HeldOut], source: Path, set_apart: str = "",
                  ran_less: str = "") -> Calibrated:
    """set_apart: the line saying which rows were not fitted, and why (read.py set_apart_line);
    ran_less: the one naming fitted rows that ran less than they state (floor.py)."""
    profile = served_profile(f, held, source)
    own = _stats("none", "fitted rows", f.rows)
    lines = [f"served-engine terms ({VLLM.name}) fitted on {profile.fitted_on}: {f.evaluations} evaluations, "
             f"{f.seconds:.0f} s; rms log error {f.rms_log:.3f}", *([set_apart] if set_apart else []),
             *([ran_less] if ran_less else []),
             f"engine facts: {VLLM.source}"]
    lines += [f"  {n:<24}{getattr(f.terms, n):12.4g}" + _note(n, f) for n in f.terms.names()]
    lines += [f"  {a} and {b}: told only together (correlation {c:+.2f}): the rows fit their combination, "
              f"not the split" for a, b, c in f.together]
    lines.append(f"mean TPOT |error| (median, p90, share priced slow; mean TTFT |error| median, p90, not fitted, "
                 f"under the {RECORDED_CLIENT} client): fitted rows {own.tpot_median_pct:.1f}%, "
                 f"{own.tpot_p90_pct:.1f}%, {own.slow_share:.0%}; TTFT {own.ttft_median_pct:.1f}%, {own.ttft_p90_pct:.1f}%")
    for s in profile.heldout:
        lines.append(f"  {s.by} {s.left_out} left out ({s.rows} rows): {s.tpot_median_pct:.1f}%, "
                     f"{s.tpot_p90_pct:.1f}%, {s.slow_share:.0%}; TTFT {s.ttft_median_pct:.1f}%, {s.ttft_p90_pct:.1f}%")
    if profile.heldout:
        all_held = [p for h in held for p in h.judged]
        worst = max(profile.heldout, key=lambda s: s.tpot_median_pct)
        lines.append(f"held out, all folds: median {100 * np.median([abs(p.tpot_error) for p in all_held]):.1f}%, "
                     f"TTFT {100 * np.median([abs(p.ttft_error) for p in all_held]):.1f}%; "
                     f"worst fold: {worst.by} {worst.left_out}")
    summary = {"terms": profile.terms, "at_bound": f.at_bound, "rms_log": profile.rms_log,
               "spread": f.spread, "untold": f.untold, "flat": f.flat,
               "together": [{"terms": [a, b], "correlation": c} for a, b, c in f.together],
               "heldout": [s.model_dump() for s in profile.heldout]}
    return Calibrated(profile, lines, summary, written=(
        "\nserved-engine profile written to {out}; judge it with batchlab validate --served-benchmarks FILE "
        "--served-engine {out}"))
