"""`batchlab experiment fidelity --small`: four workload shapes x two policies, each
real side served twice, the report with its error tables (raw and normalised), the noise
floor, the distribution tests, the step kinds and the CDF band plots."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from batchlab.experiments.studies.fidelity import POLICIES, SHAPES  # noqa: E402
from batchlab.experiments.validation.step_kinds import KINDS  # noqa: E402
from tests.helpers import cli  # noqa: E402

DATA = Path(__file__).parent / "data"
# Excerpts of the shared traces kept in tests/data (their provenance is in its README).
SOURCES = {"azure_code": str(DATA / "azure_code_300.csv"), "mooncake": str(DATA / "mooncake_100.jsonl")}


@pytest.mark.slow
def test_fidelity_small(profile_file, tmp_path):  # noqa: F811
    from batchlab.experiments.studies.fidelity import run

    r = run(tmp_path, "small", quiet=True, profile=str(profile_file), sources=SOURCES)
    assert {(c["workload"], c["policy"]) for c in r["cells"]} == {(s.name, p) for s in SHAPES for p in POLICIES}
    for c in r["cells"]:
        assert len(c["stability"]["real"]) == r["repeats"] == 2 == c["runs"]
        assert set(c["stability"]["real"]) <= {"stable", "overloaded"}
        assert all(s["factor"] is not None and s["factor"] > 0 for s in c["machine_speed"])
        judged = [m for m in c["metrics"] if m["target"] is not None]
        assert sum(c["totals"]["verdicts"].values()) == len(judged) == 15  # 12 latencies, 3 throughputs
        d = c["diagnostics"]
        assert {t["metric"] for t in d["distributions"]} == {"TTFT", "TPOT", "ITL", "E2E latency"}
        assert len(d["speeds"]) == len(d["runs"]) == 2 and d["runs"][0]["wall_s"] > 0
        assert d["step_error"]["steps"] > 0 and d["steps"]["real_steps"] == d["step_error"]["steps"]
        assert (tmp_path / "cells" / c["workload"] / c["policy"] / "cdf_band.png").stat().st_size > 0
    closed = json.loads((tmp_path / "cells" / "closed-loop" / "comparison.json").read_text())
    assert [c["policy"] for c in closed["cells"]] == list(POLICIES)
    assert "closed loop: 8 in flight" in closed["cells"][0]["diagnostics"]["workload"]
    assert [k["kind"] for k in r["step_kinds"]] == list(KINDS)
    assert sum(k["steps"] for k in r["step_kinds"]) > 0
    ps = r["per_step"]  # every real step priced; the first two runs of each cell paired
    assert ps["steps"] == sum(k["steps"] for k in r["step_kinds"]) and ps["pairs"] > 0
    assert 0 <= ps["median_ape"] < 10 and ps["real_vs_real"] >= 0 and ps["met"] in (True, False)
    t = r["totals"]  # the summary's counts: over every cell's judged numbers
    assert sum(t["verdicts"].values()) == 15 * len(r["cells"]) and t["judged"] <= 15 * len(r["cells"])
    report = (tmp_path / "report.md").read_text()
    assert "Per step: the profile's median |error|" in report
    for heading in ("Error, raw", "Error, normalised", "Real vs real", "Distribution tests",
                    "Step kinds", "Conditions of the runs", "CDFs"):
        assert heading in report, heading
    assert f"raw {t['verdicts']['ok']} ok, {t['verdicts']['miss']} miss" in report
    for f in r["files"]:
        assert (tmp_path / f).is_file(), f
        if f.endswith("cdf_band.png"):
            assert f"]({f})" in report
    stored = json.loads((tmp_path / "study.json").read_text())
    assert stored["cells"][0]["metrics"] and stored["provenance"]["machine"]["torch"]
    from batchlab.experiments.studies import get_study
    assert get_study("fidelity").report(stored) == report  # the report renders again from study.json
    # validate --real on the stored cells with the same profile: the study's own errors
    code, out, err = cli(["validate", "--real", *(str(tmp_path / "cells" / s.name) for s in SHAPES),
                          "--profile", str(profile_file), "--format", "json"])
    assert code == 0, err
    again = {(Path(c["where"]).parent.name, c["policy"]): c for c in json.loads(out)["cells"]}
    for c in r["cells"]:
        rows = {m["key"]: m for m in again[(c["workload"], c["policy"])]["metrics"]}
        for m in (m for m in c["metrics"] if m["target"] is not None):
            for field in ("error", "error_normalised"):
                want, got = m[field], rows[m["key"]][field]
                assert (got is None and want != want) or got == pytest.approx(want, abs=1e-12), \
                    (c["workload"], c["policy"], m["key"], field)


@pytest.mark.parametrize("argv, message", [
    (["experiment", "batching", "--profile", "default"], "--profile applies to one study that calibrates"),
    (["experiment", "fidelity", "--profile", "/nonexistent/p.json"], "profile not found"),
])
def test_bad_profile_options_are_one_line_errors(argv, message):
    code, _, err = cli(argv)
    assert code == 2 and message in err and err.strip().count("\n") == 0
