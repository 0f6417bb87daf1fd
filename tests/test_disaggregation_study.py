"""`batchlab experiment disaggregation` at size small: the published direction
(DistServe, Splitwise) holds in the simulator, and the study's files and report are
whole (tests/test_experiments.py run_small checks them)."""
from __future__ import annotations

import pytest

from tests.test_experiments import run_small


@pytest.mark.slow
def test_disaggregation_pays_with_long_prompts_under_tight_slos_and_not_with_short(tmp_path):
    r, _ = run_small("disaggregation", tmp_path)
    v = r["verdicts"]
    assert v["long prompts, tight SLOs"]["winner"] == "disaggregated"
    assert v["short prompts, loose TTFT"]["winner"] == "aggregated"
    # Goodput per GPU is the max rate over the GPUs, for every row.
    for row in r["rows"].values():
        assert row["goodput_per_gpu"] == pytest.approx(row["max_rate"] / row["gpus"])
