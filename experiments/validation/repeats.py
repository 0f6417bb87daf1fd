"""`validate --repeats N`: the real side served N times, and what that says about the
simulated run. Per metric: the real runs' spread, whether the simulated value falls in
their range, its error against each (raw, and normalised by each run's measured machine
speed), and whether this hardware can decide the target at all: a number whose real runs
spread wider than its target cannot be judged to that target. Per latency distribution
(TTFT, TPOT, ITL, E2E): KS and TOST (+-10%) of the simulation against the pooled real
runs, and the same tests between the real runs, which say whether the test can tell
anything here."""
from __future__ import annotations

import math
from itertools import combinations

import numpy as np

from batchlab.core.run_meta import MachineSpeed
from batchlab.core.summary import per_request_latencies
from batchlab.experiments.run_labels import is_overloaded
from batchlab.experiments.validation import compare
from batchlab.experiments.validation.pair import Run
from batchlab.experiments.validation.stat_tests import inside, ks, spread, tost

DISTRIBUTIONS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E latency"))


def samples(run: Run, stem: str) -> np.ndarray:
    """One latency value per request (per token for ITL), seconds."""
    if stem == "itl":
        return run.result.itl
    return per_request_latencies(run.result.requests)[stem]


def _verdict(run: Run) -> str | None:
    """The run's stability verdict, where it was judged."""
    return run.result.meta.stability and run.result.meta.stability.verdict


def _overloaded(run: Run) -> bool:
    return is_overloaded(run.result)


def verdict(err: float, target: float | None, noise: float, flagged: bool) -> str:
    """ok / miss against the target; undecidable where the real runs spread wider than
    it; overloaded (not judged); '' where the number has no target."""
    if target is None:
        return ""
    if flagged:
        return "overloaded"
    if not math.isfinite(noise) or noise > target:
        return "undecidable"
    return "ok" if math.isfinite(err) and abs(err) <= target else "miss"


def metric_rows(reals: list[Run], sim: Run, normalised: list[Run]) -> list[dict]:
    flagged = _overloaded(sim) or any(_overloaded(r) for r in reals)
    return summary_rows([r.result.summary() for r in reals], sim.result.summary(),
                        [n.result.summary() for n in normalised], flagged)


def summary_rows(real_sums: list[dict], sim_sum: dict, norm_sums: list[dict],
                 flagged: bool) -> list[dict]:
    """Per metric of the summaries: the real runs' values and spread, the simulated
    value, its median error over the real runs raw and normalised (norm_sums[i]: the
    simulation at real run i's machine speed), and the verdicts. flagged: some run is
    overloaded (latencies not judged)."""
    rows = []
    for cell in compare.compare_summaries(real_sums[0], sim_sum, flagged):
        values = [s.get(cell.key, math.nan) for s in real_sums]
        sp = spread(values)
        raw = [compare.rel_error(v, cell.sim) for v in values]
        norm = [compare.rel_error(v, n.get(cell.key, math.nan)) for v, n in zip(values, norm_sums)]
        raw_med, norm_med = _median(raw), _median(norm)
        rows.append({"key": cell.key, "metric": cell.metric, "stat": cell.stat, "real": values,
                     "sim": cell.sim, "spread": sp, "sim_inside": inside(cell.sim, sp),
                     "error": raw_med, "error_normalised": norm_med, "target": cell.target,
                     "overloaded": cell.overloaded,
                     "verdict": verdict(raw_med, cell.target, sp["range"], cell.overloaded),
                     "verdict_normalised": verdict(norm_med, cell.target, sp["range"], cell.overloaded)})
    return rows


VERDICTS = ("ok", "miss", "undecidable", "overloaded")
LATENCY_SUFFIX = "_ms"  # the summary keys of latency statistics


def verdict_counts(rows: list[dict], verdict: str = "verdict") -> dict[str, int]:
    """How many judged metric rows (those with a target) got each verdict."""
    judged = [m for m in rows if m["target"] is not None]
    return {v: sum(m[verdict] == v for m in judged) for v in VERDICTS}


def within(rows: list[dict], field: str, verdict: str) -> tuple[int, int]:
    """(rows within target by `field`, judged rows of stable runs with a finite `field`),
    whatever the noise floor says."""
    judged = [m for m in rows
              if m["target"] is not None and m[verdict] != "overloaded" and math.isfinite(m[field])]
    return sum(abs(m[field]) <= m["target"] for m in judged), len(judged)


def faster(rows: list[dict], field: str) -> tuple[int, int]:
    """(latency rows the simulation predicts faster by `field`, judged latency rows of
    stable runs with a finite `field`): the one-sided count."""
    errs = [m[field] for m in rows if m["target"] is not None and m["key"].endswith(LATENCY_SUFFIX)
            and not m["overloaded"] and math.isfinite(m[field])]
    return sum(e < 0 for e in errs), len(errs)


def _label(m: dict) -> str:
    return m["metric"] if m["stat"] == "value" else f"{m['metric']} {m['stat']}"


def _median(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.median(xs)) if xs else math.nan


def distribution_rows(reals: list[Run], sim: Run) -> list[dict]:
    rows = []
    for stem, label in DISTRIBUTIONS:
        per_run = [samples(r, stem) for r in reals]
        pooled, s = np.concatenate(per_run), samples(sim, stem)
        pairs = list(combinations(range(len(reals)), 2))
        rr_ks = [ks(per_run[i], per_run[j]) for i, j in pairs]
        rr_tost = [tost(per_run[i], per_run[j]) for i, j in pairs]
        ks_decides = all(t["same"] for t in rr_ks)
        tost_decides = all(t["equivalent"] for t in rr_tost)
        rows.append({"stem": stem, "metric": label, "ks": ks(s, pooled), "tost": tost(s, pooled),
                     "real_vs_real_ks": rr_ks, "real_vs_real_tost": rr_tost,
                     "ks_decides": ks_decides, "tost_decides": tost_decides})
    return rows


def analyse(reals: list[Run], sim: Run, normalised: list[Run]) -> dict:
    """normalised[i]: the profile scaled to reals[i]'s machine speed, simulated."""
    metrics = metric_rows(reals, sim, normalised)
    dists = distribution_rows(reals, sim)
    judged = [m for m in metrics if m["target"] is not None]
    undecidable = [_label(m) for m in judged if m["verdict"] == "undecidable"]
    undecidable += [f"{d['metric']} {t}" for d in dists for t, ok in (("KS", d["ks_decides"]),
                                                                       ("TOST", d["tost_decides"]))
                    if not ok]
    speeds = [r.result.meta.machine_speed or MachineSpeed() for r in reals]
    return {"runs": len(reals),
            "machine_speed": [s.factor for s in speeds],
            "compute_speed": [s.compute_factor for s in speeds],
            "speed_drift": [s.drift for s in speeds],
            "stability": {"real": [_verdict(r) for r in reals], "sim": _verdict(sim)},
            "metrics": metrics, "distributions": dists,
            "counts": verdict_counts(metrics),
            "counts_normalised": verdict_counts(metrics, "verdict_normalised"),
            "undecidable": undecidable}
