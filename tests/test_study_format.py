"""The format every study shares: prose templates filled from a result, figures as data
drawn by one renderer, study.json rendered into a docs/results page, and study modules
that load neither matplotlib nor torch until a figure is drawn or a backend run asked."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from batchlab.experiments import figures as fg
from batchlab.experiments.studies import STUDIES, get_study
from batchlab.experiments.studies.results_page import results_page, write_page
from batchlab.experiments.studies.templates import FOLDER, Template


def test_template_joins_wrapped_lines_and_keeps_markdown_lines():
    t = Template("t", "notes, ignored\n<!-- a -->\n# Title\n\nOne {x:.1f}\nwrapped line.\n\n"
                      "> **Claim:** a\nb\n>\n> **Measured:** {y}\n\n{table}\n\n{optional}\n\n"
                      "![alt](f.png)\n<!-- b -->\nsecond\n")
    text = t("a", x=1.25, y="z", table="| h |\n|:---|\n| 1 |", optional="")
    assert text == ("# Title\n\nOne 1.2 wrapped line.\n\n> **Claim:** a b\n>\n> **Measured:** z\n\n"
                    "| h |\n|:---|\n| 1 |\n\n![alt](f.png)")  # the empty paragraph is left out
    assert t("b") == "second"
    with pytest.raises(KeyError, match="no section <!-- c -->"):
        t("c")


def test_template_shows_a_stored_null_as_a_dash_where_a_number_was_formatted():
    t = Template("t", "<!-- a -->\n{v:.1%} and {w}")
    assert t("a", v=None, w=None) == "- and None"  # JSON null: NaN or not measured


def test_every_study_has_its_template_and_a_report_function():
    for name, study in STUDIES.items():
        assert (FOLDER / f"{name}.md").is_file(), name
        assert study.report is not None, name


def test_study_modules_load_without_matplotlib_or_torch():
    code = ("import sys, batchlab.experiments.studies, batchlab.experiments.figures; "
            "print([m for m in ('matplotlib', 'torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_renderer_draws_every_kind_of_mark(tmp_path):
    from batchlab.experiments.plots import draw
    import numpy as np
    grid = fg.SeatGrid(np.array([[0, -1], [0, 1]]), np.array([[True, False], [False, True]]),
                       frozenset({1}), "seats")
    panels = [fg.Panel([fg.Line([1, 2, 4], [3, 2, 1], label="a", color=fg.color("static"), marker="."),
                        fg.VLine(2, "#444444", ":", 1), fg.MarkX(2, "x"), fg.MarkY(2, "y")],
                       xscale="log", xscale_base=2, xticks=[1, 2, 4], ylim=(0, None), grid=fg.Grid("both"),
                       legend=fg.Legend(8), twin=fg.Panel([fg.Line([1, 4], [0, 5], ls="--")], ylabel="right")),
              fg.Panel([fg.Cdf([1.0, 2.0, 3.0], "c")], legend=fg.Legend()),
              fg.Panel([fg.Bars(["static", "continuous"], [1, 2], "bars", "n")]),
              fg.Panel([fg.GroupedBars(["static"], {"p50": [1.0], "p99": [2.0]}, "grouped", "s")]),
              fg.Panel([grid], legend=fg.SeatLegend())]
    path = draw(fg.Figure("all.png", panels, 1, 5, "every mark"), tmp_path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_results_page_from_study_json(tmp_path):
    out = tmp_path / "paging"
    get_study("paging").run(out, "small", quiet=True)
    page = write_page(out, tmp_path / "docs").read_text()
    stored = json.loads((out / "study.json").read_text())
    lines = page.splitlines()
    assert lines[0] == "# Paging and continuous batching are independent"
    assert lines[2].startswith("*Measured ") and stored["provenance"]["machine"]["cpu"] in lines[2]
    assert "`batchlab experiment paging --small`" in lines[2]
    assert "](paging.png)" not in page and "`paging.png`" in page  # figures named, not linked
    assert "| static | reserved |" in page  # the measured tables
    del stored["provenance"]
    with pytest.raises(ValueError, match=r"x\.json: no provenance"):
        results_page(stored, "x.json")


def test_results_page_script_refuses_a_folder_without_study_json(tmp_path, capsys):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import results_page as script
    finally:
        sys.path.pop(0)
    assert script.main([str(tmp_path), "--to", str(tmp_path / "docs")]) == 2
    err = capsys.readouterr().err.strip()
    assert "study.json: cannot read a study result" in err and len(err.splitlines()) == 1
