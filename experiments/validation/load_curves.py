"""The load curves of a served-benchmark judgement (calibration/served_bench/judge.py) as
files: a table of every (curve, objective) answer, a table of every row predicted against
measured, and one figure with a panel a curve (measured and predicted mean TPOT against the
concurrency, the objectives drawn across). `validate --served-benchmarks ... --out DIR`."""
from __future__ import annotations

import csv
import io
from collections import defaultdict
from pathlib import Path

from batchlab.calibration.served_bench.judge import Judgement, Predicted
from batchlab.core import atomic
from batchlab.experiments import figures as fg

ANSWERS_CSV = "load_curves.csv"
ROWS_CSV = "rows.csv"
FIGURE = "load_curves.png"
COLUMNS = 6  # panels a figure row
CURVE_FIELDS = ("model", "gpu", "precision", "tp", "isl", "osl")


def _csv(header: list[str], rows: list[list]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def _users(c: int | None) -> str:
    return "" if c is None else str(c)  # empty: no measured concurrency meets it


def answers_csv(j: Judgement) -> str:
    """One line an answer: the curve, the objective, the highest concurrency meeting it as
    measured and as predicted (empty: none does), how many measured steps apart, whether the
    measured curve crosses the objective (judge.py CurveAnswer.binds), and the curve's
    measured concurrencies."""
    return _csv([*CURVE_FIELDS, "objective_tpot_ms", "measured_users", "predicted_users", "steps_apart",
                 "binds", "concurrencies"],
                [[*a.curve, f"{a.objective_ms:g}", _users(a.measured), _users(a.predicted), a.steps_apart,
                  int(a.binds), " ".join(map(str, a.levels))] for a in j.answers])


def rows_csv(j: Judgement) -> str:
    """One line a configuration: measured and predicted mean TTFT and TPOT (ms), the errors."""
    return _csv([*CURVE_FIELDS, "concurrency", "engine_version", "ttft_ms", "predicted_ttft_ms", "ttft_error",
                 "tpot_ms", "predicted_tpot_ms", "tpot_error"],
                [[*p.row.curve, p.row.concurrency, p.row.engine_version, f"{p.row.ttft_s * 1e3:.4g}",
                  f"{p.ttft_s * 1e3:.4g}", f"{p.ttft_error:.4f}", f"{p.row.tpot_s * 1e3:.4g}",
                  f"{p.tpot_s * 1e3:.4g}", f"{p.tpot_error:.4f}"] for p in j.rows])


def _title(curve: tuple) -> str:
    model, gpu, precision, tp, isl, osl = curve
    return f"{model}{' ' + precision if precision else ''}, {tp} x {gpu}, {isl}/{osl}"


def figure(j: Judgement, title: str) -> fg.Figure | None:
    """A panel a load curve (a curve of one point has no answer and no panel); None: no curve."""
    curves: dict[tuple, list[Predicted]] = defaultdict(list)
    for p in j.rows:
        curves[p.row.curve].append(p)
    answered = {a.curve for a in j.answers}
    objectives = sorted({a.objective_ms for a in j.answers})
    panels = []
    for curve in sorted(answered):
        ps = sorted(curves[curve], key=lambda p: p.row.concurrency)
        users = [p.row.concurrency for p in ps]
        marks: list = [fg.Line(users, [p.row.tpot_s * 1e3 for p in ps], "measured", "#222222", "o"),
                       fg.Line(users, [p.tpot_s * 1e3 for p in ps], "predicted", "#1f77b4", "s", "--")]
        marks += [fg.MarkY(o, f"{o:g} ms") for o in objectives]
        same = sum(a.steps_apart == 0 for a in j.answers if a.curve == curve)
        panels.append(fg.Panel(marks, title=f"{_title(curve)} ({same}/{len(objectives)} same)", title_size=8,
                               xlabel="users", ylabel="mean TPOT (ms)", xscale="log", xscale_base=2,
                               xticks=users, yscale="log", plain_y=True, grid=fg.Grid(),
                               legend=fg.Legend(fontsize=7) if not panels else None))
    if not panels:
        return None
    rows = -(-len(panels) // COLUMNS)
    return fg.Figure(FIGURE, panels, rows, min(COLUMNS, len(panels)), title, width=3.6, height=3.0)


def write(j: Judgement, out_dir: str | Path, title: str) -> list[Path]:
    """The two tables and the figure (where there is a curve) in out_dir; the paths written."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in ((ANSWERS_CSV, answers_csv(j)), (ROWS_CSV, rows_csv(j))):
        atomic.write_text(d / name, text)
        written.append(d / name)
    spec = figure(j, title)
    if spec is not None:
        from batchlab.experiments.plots import draw  # lazy: matplotlib
        written.append(draw(spec, d))
    return written
