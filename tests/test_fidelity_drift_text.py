"""The fidelity report says how far the machine's speed moved within the real runs
(experiments.machine_speed.drift), and validate's explanation gives each run's range."""
from __future__ import annotations

from batchlab.experiments.studies.fidelity_report import drift_sentence
from batchlab.experiments.validation.numbers import drift_text


def cell(drifts):
    return {"speed_drift": drifts}


def test_the_summary_counts_runs_that_drifted():
    text = drift_sentence([cell([0.05, 0.3, None]), cell([0.2])])
    assert "median 20%" in text and "2 of 3 runs measured moved more than 10%" in text


def test_no_drift_measured_says_nothing():
    assert drift_sentence([cell([None, None]), {"speed_drift": None}, {}]) == ""


def test_validate_names_the_range_and_windows():
    ms = {"drift": 0.25, "drift_windows": 7, "drift_range": [0.95, 1.2]}
    assert drift_text(ms) == ", moving 0.95-1.20 within the run (p10-p90 of 7 windows of 2 s: 25% of the mean)"
    assert drift_text({"drift": None, "drift_windows": 2}) == "" and drift_text({}) == ""


def test_the_repeats_summary_and_the_conditions_column():
    from batchlab.experiments.validation.repeats_text import drifts, summary_lines

    rep = {"runs": 2, "machine_speed": [1.0, 1.1], "compute_speed": [None, None], "speed_drift": [0.12, None],
           "stability": {"real": ["stable", "stable"], "sim": "stable"}, "undecidable": [],
           "counts": {"ok": 1, "miss": 0, "undecidable": 0, "overloaded": 0},
           "counts_normalised": {"ok": 1, "miss": 0, "undecidable": 0, "overloaded": 0}}
    assert summary_lines(rep)[0].endswith("; moving within each run by 12%, -")
    assert "moving" not in summary_lines({**rep, "speed_drift": [None, None]})[0]

    assert drifts([0.12, None, 0.3]) == "12%, -, 30%"
    assert drifts([None, None]) == "" and drifts(None) == ""


def test_a_normalised_lean_over_issue_14s_limit_says_what_to_do():
    from batchlab.experiments.studies.fidelity_report import lean_sentence

    assert lean_sentence(63, 96).startswith(" Normalised, the simulation predicts the faster run in 63 of 96")
    assert "calibrate --from-run cells/*" in lean_sentence(63, 96)
    assert "the slower run in 62 of 96" in lean_sentence(34, 96)
    assert lean_sentence(57, 96) == "" and lean_sentence(39, 96) == "" and lean_sentence(0, 0) == ""
