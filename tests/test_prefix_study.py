"""`batchlab experiment prefix-caching` at size small: caching helps where prefixes are
shared, prefix-aware routing hits more than least-loaded, and the reduced real run hits
as the simulation does. Slow (a minute on 2 cores): marked so; CI runs it."""
from __future__ import annotations

import json

import pytest

from batchlab.experiments.studies import get_study
from tests.helpers import shared


@pytest.mark.slow
def test_prefix_caching_study_small_with_backend(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("BATCHLAB_TRACES", str(shared("mooncake_synthetic.jsonl").parent))
    r = get_study("prefix-caching").run(tmp_path, "small", backend=True, quiet=True)
    on, off = r["fixed"]["multiturn, caching on"], r["fixed"]["multiturn, caching off"]
    assert on["prefix_cache_hit_rate"] > 0.5 and off["prefix_cache_hit_rate"] == 0
    assert on["p99_ttft_ms"] < off["p99_ttft_ms"]
    assert r["max_rate"]["multiturn, caching on"] > r["max_rate"]["multiturn, caching off"]
    assert r["max_rate"]["mooncake, caching on"] >= r["max_rate"]["mooncake, caching off"]
    for kind in ("mooncake", "multiturn"):
        assert (r["routing"][f"{kind}, prefix_aware"]["prefix_cache_hit_rate"]
                > r["routing"][f"{kind}, least_loaded"]["prefix_cache_hit_rate"])
    real, sim = r["backend"]["rows"]["real"], r["backend"]["rows"]["sim"]
    assert real["prefix_cache_hit_rate"] > 0.3
    assert abs(real["prefix_cache_hit_rate"] - sim["prefix_cache_hit_rate"]) < 0.05
    for f in r["files"]:
        assert (tmp_path / f).stat().st_size > 0, f
    stored = json.loads((tmp_path / "study.json").read_text())
    assert get_study("prefix-caching").report(stored) == (tmp_path / "report.md").read_text()
