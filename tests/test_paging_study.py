"""`batchlab experiment paging`: the 2 x 2 of batching x KV allocation, at size small."""
from __future__ import annotations

import json

import pytest

from batchlab.experiments.studies import get_study


def run_small(tmp_path, backend=False):
    out = tmp_path / "paging"
    r = get_study("paging").run(out, "small", backend=backend, quiet=True)
    report = (out / "report.md").read_text()
    for f in r["files"]:
        assert (out / f).stat().st_size > 0, f
    assert get_study("paging").report(json.loads((out / "study.json").read_text())) == report
    return r, report


def test_paging_fits_more_and_reservation_never_preempts(tmp_path):
    r, report = run_small(tmp_path)
    rows = r["rows"]
    for b in ("static", "continuous"):
        reserved, paged = rows[f"{b}+reserved"], rows[f"{b}+paged"]
        assert reserved["preemptions"] == 0 and paged["preemptions"] > 0
        assert paged["mean_concurrency"] > 1.2 * reserved["mean_concurrency"]
        # Reserved holds whole budgets: more reserved than filled.
        assert reserved["kv_reserved"] > reserved["kv_utilization"]
    # Each knob helps alone: continuous without paging beats static without it.
    assert rows["continuous+reserved"]["output_throughput"] > rows["static+reserved"]["output_throughput"]
    assert rows["static+paged"]["output_throughput"] > rows["static+reserved"]["output_throughput"]
    assert "](paging.png)" in report and "Claim" in report


@pytest.mark.slow
def test_paging_backend_variant_takes_the_simulators_decisions(tmp_path):
    pytest.importorskip("torch")
    r, report = run_small(tmp_path, backend=True)
    b = r["backend"]["rows"]
    for name, row in b.items():
        assert row["same_decisions"], name
        assert row["preemptions"] == row["sim_preemptions"]
        assert row["completed"] == 16
    for batching in ("static", "continuous"):
        assert b[f"{batching}+reserved"]["preemptions"] == 0
        assert b[f"{batching}+paged"]["mean_concurrency"] > b[f"{batching}+reserved"]["mean_concurrency"]
    assert "On the real backend (reduced)" in report
