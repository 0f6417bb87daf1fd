"""`batchlab experiment kv-tiers` at size small: swapping over a fast link beats a slow
one under KV pressure, nothing differs with an ample pool, `cheapest` never does worse
than the worse of its choices, and the real backend's swaps give the recompute run's
tokens. Slow (under a minute on 2 cores): marked so; CI runs it."""
from __future__ import annotations

import json

import pytest

from batchlab.experiments.studies import get_study


@pytest.mark.slow
def test_kv_tiers_study_small_with_backend(tmp_path):
    pytest.importorskip("torch")
    r = get_study("kv-tiers").run(tmp_path, "small", backend=True, quiet=True)
    rows = r["pressure"]["rows"]
    pools = sorted({row["blocks"] for row in rows.values()})
    tight, ample = pools[1], pools[-1]
    at = lambda n, m: rows[f"{n}, {m}"]  # noqa: E731
    assert at(tight, "recompute")["preemptions"] > 0 and at(ample, "recompute")["preemptions"] == 0
    assert at(tight, "swap, 25 GB/s")["mean_ttft_ms"] < at(tight, "swap, 0.5 GB/s")["mean_ttft_ms"]
    assert at(tight, "swap, 25 GB/s")["recomputed_tokens"] == 0 < at(tight, "recompute")["recomputed_tokens"]
    assert len({at(ample, m)["mean_ttft_ms"] for m in ("recompute", "swap, 25 GB/s", "swap, 0.5 GB/s")}) == 1
    slow = at(tight, "cheapest, 0.5 GB/s")
    assert slow["mean_ttft_ms"] < at(tight, "swap, 0.5 GB/s")["mean_ttft_ms"]
    found = r["replicas"]["found"]
    for t in r["replicas"]["turns"]:
        assert found[f"{t}, cpu"] is not None and found[f"{t}, none"] is not None
        assert found[f"{t}, cpu"] <= found[f"{t}, none"]
    assert r["backend"]["same_tokens"] and r["backend"]["rows"]["swap"]["bytes_copied"] > 0
    for f in r["files"]:
        assert (tmp_path / f).stat().st_size > 0, f
    stored = json.loads((tmp_path / "study.json").read_text())
    assert get_study("kv-tiers").report(stored) == (tmp_path / "report.md").read_text()
