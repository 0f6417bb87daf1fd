"""What `validate --repeats N` prints after the usual report: the noise floor table (each
metric's real-vs-real spread, the simulated value, whether it is in the real range, its
error raw and normalised, the verdict), the distribution tests, and the summary of what
this hardware cannot decide."""
from __future__ import annotations

import math

from batchlab.experiments.markdown import fmt
from batchlab.experiments.validation.numbers import num, pct


def _table(header: list[str], rows: list[list[str]], left: int = 2) -> str:
    widths = [max(len(r[j]) for r in [header, *rows]) for j in range(len(header))]
    out = []
    for k, r in enumerate([header, *rows]):
        cells = [c.ljust(w) if j < left else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))]
        out.append("  ".join(cells).rstrip())
        if k == 0:
            out.append("-" * len(out[0]))
    return "\n".join(out)


def _p(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.3f}"


def metrics_block(rep: dict) -> str:
    header = ["", "", "real min", "real max", "spread", "sim", "in range", "error", "norm. err",
              "verdict"]
    rows = []
    for m in rep["metrics"]:
        sp = m["spread"]
        unit = " (ms)" if m["key"].endswith("_ms") else ""
        verdict = m["verdict"] + (f" / {m['verdict_normalised']}"
                                  if m["verdict_normalised"] != m["verdict"] else "")
        rows.append([m["metric"] + unit, m["stat"] if m["stat"] != "value" else "",
                     num(sp["min"]), num(sp["max"]), pct(sp["range"], False), num(m["sim"]),
                     {True: "yes", False: "no", None: "-"}[m["sim_inside"]],
                     pct(m["error"]), pct(m["error_normalised"]), verdict])
    return _table(header, rows)


def distributions_block(rep: dict) -> str:
    header = ["", "KS D", "KS p", "real-vs-real KS p (min)", "TOST ratio", "TOST p",
              "real-vs-real TOST p (max)", "KS decides", "TOST decides"]
    rows = []
    for d in rep["distributions"]:
        rr_ks = [t["p"] for t in d["real_vs_real_ks"] if math.isfinite(t["p"])]
        rr_tost = [t["p"] for t in d["real_vs_real_tost"] if math.isfinite(t["p"])]
        k, t = d["ks"], d["tost"]
        rows.append([d["metric"], _p(k["statistic"]), _p(k["p"]), _p(min(rr_ks) if rr_ks else None),
                     _p(t["ratio"]), _p(t["p"]), _p(max(rr_tost) if rr_tost else None),
                     "yes" if d["ks_decides"] else "no", "yes" if d["tost_decides"] else "no"])
    return _table(header, rows, left=1)


def speeds(memory: list[float | None], compute: list[float | None] | None, digits: int = 3) -> str:
    """Each run's measured machine speed, memory side / compute side ('-': not
    measured; no compute list: records from before the compute side was measured)."""
    spec = f"{{:.{digits}f}}"
    pairs = zip(memory, compute or [None] * len(memory))
    return ", ".join(f"{fmt(k, spec)}/{fmt(c, spec)}" for k, c in pairs)


def drifts(values: list[float | None] | None) -> str:
    """How far each run's level moved within it (experiments.machine_speed.drift): '12%, -, 30%';
    '' where no run has the figure."""
    if not values or all(d is None for d in values):
        return ""
    return ", ".join("-" if d is None else f"{d * 100:.0f}%" for d in values)


def summary_lines(rep: dict) -> list[str]:
    c, cn = rep["counts"], rep["counts_normalised"]
    per_run = speeds(rep["machine_speed"], rep.get("compute_speed"))
    moved = drifts(rep.get("speed_drift"))
    st = rep["stability"]
    lines = [f"{rep['runs']} real runs ({', '.join(st['real'])}; sim {st['sim']}); machine speed "
             f"(step time / profile price: steady decode steps / compute-bound steps' FLOP terms) per "
             f"run: {per_run}" + (f"; moving within each run by {moved}" if moved else ""),
             f"judged numbers, raw: {c['ok']} ok, {c['miss']} miss, {c['undecidable']} undecidable, "
             f"{c['overloaded']} overloaded; normalised: {cn['ok']} ok, {cn['miss']} miss, "
             f"{cn['undecidable']} undecidable"]
    if rep["undecidable"]:
        lines.append("this hardware cannot decide (the real runs disagree with each other more "
                     "than the target, or the test rejects between real runs): "
                     + ", ".join(rep["undecidable"]))
    else:
        lines.append("every judged number is decidable here: the real runs agree within its target")
    return lines


def render_repeats(rep: dict) -> str:
    legend = ("spread: (max - min) / median of the real runs; error: median over the real runs "
              "of (sim - real) / real; norm. err: against each run, the profile scaled to that "
              "run's machine speed; undecidable: the real runs spread wider than the target")
    tests = ("KS: two-sample Kolmogorov-Smirnov, sim vs the pooled real runs (p < 0.05: "
             "different); TOST: equivalence of the geometric means within +-10% (p < 0.05: "
             "equivalent); a test decides only where it passes between the real runs themselves")
    return "\n".join([f"noise floor over {rep['runs']} real runs ({legend})", "", metrics_block(rep),
                      "", tests, "", distributions_block(rep), "", *summary_lines(rep)])
