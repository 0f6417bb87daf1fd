"""The fidelity report says how far the machine's speed moved within the real runs
(experiments.machine_speed.drift) and what to do about a normalised lean; validate says
how far each run's speed moved, and where it was not measured."""
from __future__ import annotations

from batchlab.core.run_meta import MachineSpeed
from batchlab.experiments.studies.fidelity import drift_sentence, lean_sentence
from batchlab.experiments.validation.numbers import drifts
from batchlab.experiments.validation.records import (CellDiagnostics, CellStability, Counts, JudgedCell,
                                                     Totals)
from batchlab.experiments.validation.render import diagnostic_lines


def cell(drift_values: list[float | None], factors: list[float | None] | None = None) -> JudgedCell:
    factors = factors or [1.0] * len(drift_values)
    speeds = [MachineSpeed(factor=k, drift=d, why=None if k else "no steady decode step")
              for k, d in zip(factors, drift_values)]
    none = Counts()
    return JudgedCell(where="here", policy="continuous", runs=len(speeds),
                      stability=CellStability(real=["stable"] * len(speeds), sim="stable"), machine_speed=[],
                      metrics=[], totals=Totals(within=0, judged=0, within_normalised=0, judged_normalised=0,
                                                faster=0, latency=0, faster_normalised=0, latency_normalised=0,
                                                verdicts=none, verdicts_normalised=none),
                      diagnostics=CellDiagnostics(workload="w", runs=[], speeds=speeds))


def test_the_summary_counts_runs_that_drifted():
    text = drift_sentence([cell([0.05, 0.3, None]), cell([0.2])])
    assert "median 20%" in text and "2 of 3 runs measured moved more than 10%" in text
    assert text.endswith("on the memory side. ")  # the summary's next sentence follows


def test_no_drift_measured_says_nothing():
    assert drift_sentence([cell([None, None]), cell([])]) == ""


def test_validate_gives_each_runs_drift_and_why_a_speed_is_missing():
    lines = diagnostic_lines(cell([0.12, None], [1.0, None]))
    moving = next(line for line in lines if line.startswith("machine speed moving"))
    assert "by 12%, - (p10-p90 of its 2 s windows" in moving
    assert "machine speed not measured: run 2 (no steady decode step)" in lines
    assert not any(line.startswith("machine speed moving") for line in diagnostic_lines(cell([None, None])))


def test_the_conditions_column():
    assert drifts([0.12, None, 0.3]) == "12%, -, 30%"
    assert drifts([None, None]) == "" and drifts(None) == ""


def test_a_normalised_lean_over_issue_14s_limit_says_what_to_do():
    assert lean_sentence(63, 96).startswith(" Normalised, the simulation predicts the faster run in 63 of 96")
    assert "calibrate --from-run cells/*" in lean_sentence(63, 96)
    assert "the slower run in 62 of 96" in lean_sentence(34, 96)
    assert lean_sentence(57, 96) == "" and lean_sentence(39, 96) == "" and lean_sentence(0, 0) == ""
