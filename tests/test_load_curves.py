"""The load curves of a served-benchmark judgement as files (experiments/validation/
load_curves.py): every answer in a table that says what the judgement says, every row
predicted against measured, and a figure with a panel a curve; `validate --served-benchmarks
--out DIR` writes them."""
from __future__ import annotations

import csv
import dataclasses
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.calibration.served_bench.judge import Predicted, judge
from batchlab.experiments.validation import load_curves
from tests.helpers import cli, one_line_error
from tests.test_served_bench import line, row, table


def _read(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def _curve(isl: int, measured: dict[int, float], priced: dict[int, float]) -> list[Predicted]:
    return [Predicted(dataclasses.replace(row(c=c, tpot=t), isl=isl), 0.1, priced[c]) for c, t in measured.items()]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0.005, 0.08), st.floats(0.005, 0.08)), min_size=2, max_size=6),
       st.lists(st.tuples(st.floats(0.005, 0.08), st.floats(0.005, 0.08)), min_size=1, max_size=5))
def test_the_answer_table_holds_every_answer_of_the_judgement(first, second):
    users = [4, 8, 16, 32, 64, 128]
    rows = (_curve(1024, {u: m for u, (m, _) in zip(users, first)}, {u: p for u, (_, p) in zip(users, first)})
            + _curve(4096, {u: m for u, (m, _) in zip(users, second)}, {u: p for u, (_, p) in zip(users, second)}))
    j = judge(rows)
    lines = _read(load_curves.answers_csv(j))
    assert len(lines) == len(j.answers) == 3 * (1 + (len(second) > 1))  # a one-point curve has no answer
    for a, got in zip(j.answers, lines):
        assert (got["isl"], got["objective_tpot_ms"]) == (str(a.curve[4]), f"{a.objective_ms:g}")
        assert got["measured_users"] == ("" if a.measured is None else str(a.measured))
        assert got["predicted_users"] == ("" if a.predicted is None else str(a.predicted))
        assert int(got["steps_apart"]) == a.steps_apart
        assert got["concurrencies"].split() == [str(u) for u in users[:len(first if a.curve[4] == 1024 else second)]]
        # an answer at the curve's top is met by every measured point: it cannot be wrong on the high side
        assert got["binds"] == str(int(got["measured_users"] != got["concurrencies"].split()[-1]))
    same = [float(a.steps_apart == 0) for a in j.answers if a.objective_ms == 20.0]
    assert j.answer_share(0, 20.0) == pytest.approx(sum(same) / len(same))
    binding = [float(a.steps_apart == 0) for a in j.answers if a.binds]
    if binding:
        assert j.answer_share(0, binding=True) == pytest.approx(sum(binding) / len(binding))
    assert len(_read(load_curves.rows_csv(j))) == len(rows)


def test_the_figure_has_a_panel_a_curve_and_none_for_a_lone_point():
    rows = (_curve(1024, {4: 0.01, 8: 0.02, 16: 0.04}, {4: 0.011, 8: 0.019, 16: 0.05})
            + _curve(2048, {4: 0.01, 8: 0.03}, {4: 0.01, 8: 0.03}) + _curve(4096, {8: 0.02}, {8: 0.02}))
    spec = load_curves.figure(judge(rows), "t")
    assert len(spec.panels) == 2 and (spec.rows, spec.cols) == (1, 2)
    assert "1024" in spec.panels[0].title and "3/3 same" in spec.panels[1].title
    assert load_curves.figure(judge(_curve(4096, {8: 0.02}, {8: 0.02})), "t") is None


def test_validate_writes_the_tables_and_the_figure(tmp_path):
    path = table(tmp_path, line(c=4, osl=32), line(c=16, osl=32, ttft="190", tpot="22"))
    out = tmp_path / "out"
    code, text, err = cli(["validate", "--served-benchmarks", str(path), "--out", str(out)])
    assert code == 0, err
    answers = _read((out / load_curves.ANSWERS_CSV).read_text())
    assert [a["objective_tpot_ms"] for a in answers] == ["20", "30", "50"]
    assert {a["concurrencies"] for a in answers} == {"4 16"}
    assert [r["concurrency"] for r in _read((out / load_curves.ROWS_CSV).read_text())] == ["4", "16"]
    assert (out / load_curves.FIGURE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "the same by objective: 20 ms" in text
    (tmp_path / "file").write_text("x")
    code, _, err = cli(["validate", "--served-benchmarks", str(path), "--out", str(tmp_path / "file")])
    one_line_error(code, err, "is a file; expected a directory")
