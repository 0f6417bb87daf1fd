"""benchmarks/gpu/pick_rate.py sizes the GPU check's load from the fresh profile: the
highest rung of its ladder that the simulation keeps stable with a median TPOT at most
SLOWDOWN x the lightest load's; the next rung breaks one of the two."""
from __future__ import annotations

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location(
    "pick_rate", Path(__file__).parents[1] / "benchmarks" / "gpu" / "pick_rate.py")
pick_rate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pick_rate)

WORKLOAD = ["--workload", "chat", "--num-requests", "32", "--max-output-len", "64"]


def test_the_picked_rate_is_loaded_below_saturation_and_the_next_rung_is_not():
    profile = "batchlab-tiny-cpu"
    rate = pick_rate.pick(profile, WORKLOAD)
    assert rate in pick_rate.LADDER
    light = pick_rate.simulated(profile, WORKLOAD, pick_rate.LADDER[0])["median_tpot_ms"]
    at = pick_rate.simulated(profile, WORKLOAD, rate)
    assert at["stability"] == "stable" and at["median_tpot_ms"] <= pick_rate.SLOWDOWN * light
    i = pick_rate.LADDER.index(rate)
    if i + 1 < len(pick_rate.LADDER):
        nxt = pick_rate.simulated(profile, WORKLOAD, pick_rate.LADDER[i + 1])
        assert nxt["stability"] != "stable" or nxt["median_tpot_ms"] > pick_rate.SLOWDOWN * light
    assert rate > pick_rate.LADDER[0]  # chat on this profile batches before it slows 1.5x


def test_a_bad_workload_is_one_line_not_a_traceback():
    import pytest
    with pytest.raises(SystemExit, match="batchlab simulate failed at rate 0.25: .*no_such_preset"):
        pick_rate.pick("batchlab-tiny-cpu", ["--workload", "no_such_preset"])
