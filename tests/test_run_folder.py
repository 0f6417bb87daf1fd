"""The run folder (core/run_folder.py) and its typed meta (core/run_meta.py): one writer,
one reader, every layout read back, and meta.json written back byte for byte."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.run_folder import RunSet, find_runs, parse_meta, to_json, write_run
from batchlab.core.run_meta import MachineSpeed, RunMeta, Stability
from batchlab.core.workload import Workload
from batchlab.sim import simulate


def run(world: str = "sim"):
    w = Workload(np.arange(6) * 0.05, np.full(6, 20), np.full(6, 5), description=["six requests"])
    result = simulate(w, SchedulerConfig(policy="continuous"), LinearCostModel(0.01), 100,
                      meta={"model": "batchlab-tiny", "zeta": 1})
    result.meta.world = world  # a stand-in for a served run
    return result


def test_meta_keeps_its_keys_in_order_extras_included_and_appends_new_ones():
    text = ('{"world": "real", "zeta": [1, 2], "policy": "chunked", "wall_s": 2, '
            '"machine_speed": {"factor": 1.1, "method": "m", "drift": null}}')
    meta = RunMeta.model_validate(json.loads(text))
    assert meta.policy == "chunked" and meta.zeta == [1, 2] and meta.machine_speed.factor == 1.1
    assert meta.model is None and not meta.recorded("model") and meta.machine_speed.recorded("drift")
    assert json.dumps(meta.as_dict()) == text  # an int stays an int, null stays null
    meta.stability = Stability(verdict="stable")
    meta.policy = "static"
    assert list(meta.as_dict()) == ["world", "zeta", "policy", "wall_s", "machine_speed", "stability"]
    assert meta.as_dict()["stability"] == {"verdict": "stable"}
    copied = meta.model_copy(update={"cost_model": "normalised"})
    assert list(copied.as_dict())[-1] == "cost_model" and not meta.recorded("cost_model")


def test_a_field_of_the_wrong_type_is_one_line_naming_the_file_and_field(tmp_path):
    path = tmp_path / "meta.json"
    for bad, field in (({"world": "real", "num_kv_blocks": "many"}, "num_kv_blocks"),
                       ({"world": "real", "block_size": True}, "block_size"),
                       ({"machine_speed": {"factor": "fast"}}, "machine_speed.factor")):
        with pytest.raises(ValueError) as e:
            parse_meta(bad, path)
        assert str(e.value).startswith(f"{path}: {field} is ") and "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"meta.json: continuous.threads is 'two'"):
        parse_meta({"threads": "two"}, path, "continuous")


def test_one_run_folder_reads_back_what_was_written(tmp_path):
    result = run("real")
    result.meta.machine_speed = MachineSpeed(factor=1.2, steps=3, spread=math.nan)
    summary = {**result.summary(), "stability": "stable"}
    written = write_run(tmp_path / "real", result, summary)
    assert [p.name for p in written] == ["requests.csv", "steps.csv"]
    (found,) = find_runs(tmp_path / "real")
    assert found.where == str(tmp_path / "real") and found.key == ""
    assert found.meta.as_dict() == {**result.meta.as_dict(), "machine_speed": {"factor": 1.2, "steps": 3,
                                                                               "spread": None}}
    assert (tmp_path / "real" / "meta.json").read_text() == to_json(result.meta.as_dict()) + "\n"
    steps = found.steps()
    assert np.array_equal(steps["duration_s"], result.steps["duration_s"])
    assert found.summary()["stability"] == "stable"
    assert found.lengths() == ([20] * 6, [5] * 6)


def test_runs_side_by_side_are_keyed_by_policy(tmp_path):
    runs = RunSet(tmp_path)
    for name in ("static", "continuous"):
        runs.add(name, run(), {"completed": 6.0, "mean_tpot_ms": math.nan})
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert list(meta) == ["static", "continuous"] and meta["static"]["zeta"] == 1
    header = (tmp_path / "static" / "requests.csv").read_text().splitlines()[0]
    assert header.endswith("ttft_ms,tpot_ms,e2el_ms,queueing_delay_ms")  # with latencies
    found = find_runs(tmp_path)
    assert [f.where for f in found] == [f"{tmp_path} (static)", f"{tmp_path} (continuous)"]
    assert found[1].meta.policy == "continuous" and math.isnan(found[1].summary()["mean_tpot_ms"])


def test_validate_layout_finds_each_policys_real_runs_in_order(tmp_path):
    for folder in ("chunked/real_2", "chunked/real", "continuous/real", "continuous/sim"):
        write_run(tmp_path / folder, run("real"), {"completed": 6.0})
    assert [f.folder.relative_to(tmp_path).as_posix() for f in find_runs(tmp_path)] == [
        "chunked/real", "chunked/real_2", "continuous/real"]
    with pytest.raises(ValueError, match="not a batchlab run"):
        find_runs(tmp_path / "chunked")
