"""`batchlab experiment fidelity --small`: four workload shapes x two policies, each
real side served twice, the report with its error tables (raw and normalised), the noise
floor, the distribution tests, the step kinds and the CDF band plots."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from batchlab.experiments.cli import main  # noqa: E402
from batchlab.experiments.studies.fidelity_plan import POLICIES, SHAPES  # noqa: E402
from batchlab.experiments.validation.step_kinds import KINDS  # noqa: E402
from tests.test_validate_cli import cli, profile_file  # noqa: E402,F401  (the fixture)

DATA = Path(__file__).parent / "data"
# Excerpts of the shared traces kept in tests/data (their provenance is in its README).
SOURCES = {"azure_code": str(DATA / "azure_code_300.csv"), "mooncake": str(DATA / "mooncake_100.jsonl")}


@pytest.mark.slow
def test_fidelity_small(profile_file, tmp_path):  # noqa: F811
    from batchlab.experiments.studies.fidelity import run

    r = run(tmp_path, "small", quiet=True, profile=str(profile_file), sources=SOURCES)
    assert {(c["workload"], c["policy"]) for c in r["cells"]} == {(s.name, p) for s in SHAPES for p in POLICIES}
    for c in r["cells"]:
        assert len(c["stability"]["real"]) == r["repeats"] == 2
        assert set(c["stability"]["real"]) <= {"stable", "overloaded"}
        assert all(k is not None and k > 0 for k in c["machine_speed"])
        judged = [m for m in c["metrics"] if m["target"] is not None]
        assert sum(c["counts"].values()) == len(judged) == 15  # 12 latencies, 3 throughputs
        assert {d["metric"] for d in c["distributions"]} == {"TTFT", "TPOT", "ITL", "E2E latency"}
        assert (tmp_path / "cells" / c["workload"] / c["policy"] / "cdf_band.png").stat().st_size > 0
    closed = json.loads((tmp_path / "cells" / "closed-loop" / "comparison.json").read_text())
    assert "closed loop: 8 in flight" in closed["continuous"]["workload"]
    assert [k["kind"] for k in r["step_kinds"]] == list(KINDS)
    assert sum(k["steps"] for k in r["step_kinds"]) > 0
    ps = r["per_step"]  # every real step priced; the first two runs of each cell paired
    assert ps["steps"] == sum(k["steps"] for k in r["step_kinds"]) and ps["pairs"] > 0
    assert 0 <= ps["median_ape"] < 10 and ps["real_vs_real"] >= 0 and ps["met"] in (True, False)
    report = (tmp_path / "report.md").read_text()
    assert "Per step: the profile's median |error|" in report
    for heading in ("Error, raw", "Error, normalised", "Real vs real", "Distribution tests",
                    "Step kinds", "Conditions of the runs", "CDFs"):
        assert heading in report, heading
    for f in r["files"]:
        if f.endswith(".png"):
            assert f"]({f})" in report
    assert json.loads((tmp_path / "study.json").read_text())["cells"][0]["metrics"]
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
