"""Profiles: round trip, one-line errors for bad files, the shipped default, and the
simulator reading one without torch or calibration/. No torch needed."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from batchlab.calibration.sweep.grid import GridPoint, build_batch, default_grid, features_of, parse_key, tiny_grid
from batchlab.core.batch import StepFeatures, step_features
from batchlab.core.kv import BlockManager
from batchlab.core.cost.profile import load_profile, PROFILE_VERSION, ProfileError, shipped_profiles
from batchlab.core.model.presets import MODELS
from tests.profiles import make_profile
from tests.same_runs import assert_same


def test_round_trip(tmp_path):
    p = make_profile()
    path = tmp_path / "p.json"
    p.save(path)
    q = load_profile(path)
    assert q == p
    f = StepFeatures(num_seqs=3, decode_tokens=3, kv_tokens_read=300, attention_pairs=300)
    assert q.cost_model().step_time(f) == p.cost_model().step_time(f) > 0.005
    assert q.num_kv_blocks == 321 and q.block_size == 16 and q.model.name == "batchlab-tiny"


@pytest.mark.parametrize("content,problem", [
    ("{not json", "not a JSON document"),
    ("[1, 2]", "not a batchlab profile"),
    ('{"format": "batchlab-profile", "version": 99}', "profile version 99"),
    ('{"format": "batchlab-profile", "version": 1, "model": {}}', "bad profile field"),
])
def test_bad_files_give_one_line_naming_the_file(tmp_path, content, problem):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    msg = str(e.value)
    assert str(path) in msg and problem in msg and "\n" not in msg


def test_wrong_version_of_a_real_profile(tmp_path):
    data = json.loads(make_profile().model_dump_json())
    data["version"] = PROFILE_VERSION + 1
    path = tmp_path / "future.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError, match="re-run batchlab calibrate"):
        load_profile(path)


def test_missing_file_lists_the_shipped_names(tmp_path):
    with pytest.raises(ProfileError, match="profile not found.*default"):
        load_profile(tmp_path / "nope.json")


def test_shipped_default_loads_by_name():
    assert "batchlab-small-cpu" in shipped_profiles()
    p = load_profile("default")
    assert p == load_profile("batchlab-small-cpu")
    assert p.model == MODELS["batchlab-small"] and p.device.kind == "cpu"
    assert p.fit.heldout.n > 0 and p.measurements
    assert p.cost_model().step_time(features_of(GridPoint(8, 256))) > 0


def test_simulator_reads_a_profile_without_torch_or_calibration():
    code = ("import sys; from batchlab.core.cost.profile import load_profile; import batchlab.sim; "
            "p = load_profile('default'); p.cost_model(); "
            "bad = [m for m in ('torch', 'batchlab.calibration', 'batchlab.backend') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_grid_keys_round_trip_and_batches_have_the_declared_shape():
    for grid in (default_grid(), tiny_grid()):
        assert len({p.key for p in grid.points}) == len(grid.points)
        held = grid.heldout()
        assert 0 < len(held) < len(grid.points) / 2
        for region in ("decode", "prefill", "mixed"):
            assert any(p.region == region for p in grid.points if p.key in held)
        for p in grid.points:
            assert parse_key(p.key) == p
    kv = BlockManager(2000, 16)
    b = build_batch(GridPoint(4, 100, 32, 64), kv)
    f = step_features(b)
    assert (f.num_seqs, f.num_prefill_seqs, f.decode_tokens, f.prefill_tokens) == (5, 1, 4, 32)
    assert f.kv_tokens_read == sum(c + 1 for c in GridPoint(4, 100).contexts()) + 96
    f = features_of(GridPoint(chunk=64, chunks=3))
    assert (f.num_seqs, f.num_prefill_seqs, f.prefill_tokens, f.attention_pairs) == (3, 3, 192, 3 * 64 * 65 // 2)


def test_fast_forward_with_the_fitted_model_equals_stepping():
    import numpy as np

    from batchlab.core.config import SchedulerConfig
    from batchlab.core.workload import Workload
    from batchlab.sim import simulate

    cost = load_profile("default").cost_model()
    rng = np.random.default_rng(3)
    n = 40
    work = Workload(np.cumsum(rng.exponential(0.2, n)), rng.integers(1, 400, n), rng.integers(1, 150, n))
    for policy in ("static", "continuous", "chunked"):
        cfg = SchedulerConfig(policy=policy, max_num_seqs=12, max_num_batched_tokens=256)
        fast = simulate(work, cfg, cost, 400, fast_forward=True)
        slow = simulate(work, cfg, cost, 400, fast_forward=False)
        assert_same(fast, slow)


def test_a_version_1_profile_still_loads(tmp_path):
    """Version 2 added `grid`; files written before it load, with the grid unknown and
    the context length of the model's preset."""
    data = json.loads(make_profile().model_dump_json())
    data["version"] = 1
    del data["grid"]
    data["model"].pop("max_context", None)  # nor did model specs record their context length
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(data))
    p = load_profile(path)
    assert p.version == 1 and p.grid is None and p.model == MODELS["batchlab-tiny"]
    assert load_profile("default").grid.name == "default"  # the shipped one records its grid
    # A checkpoint's profile from another machine: its context is unknown, not an error.
    data["model"]["name"], data["model_source"] = "my-llama", "/elsewhere/my-llama"
    path.write_text(json.dumps(data))
    assert load_profile(path).model.max_context is None


def test_quick_grid_profiles_carry_a_warning():
    from batchlab.core.cost.profile import GridInfo, Measurement
    assert make_profile().smoke_test_warning() is None
    quick = make_profile(grid=GridInfo(name="quick", points=18, rounds=3, target_s=0))
    assert "quick grid" in quick.smoke_test_warning() and "--grid default" in quick.smoke_test_warning()
    full = make_profile(grid=GridInfo(name="default", points=93, rounds=5, target_s=1.2))
    assert full.smoke_test_warning() is None
    # a version-1 profile: no grid recorded, but only a smoke test's handful of points
    m = Measurement(point="d1x16", region="decode", features={}, median_s=0.01, mad_s=0, reps=3)
    assert "18 points" in make_profile(measurements=[m] * 18).smoke_test_warning()
    assert load_profile("default").smoke_test_warning() is None


def test_unresolved_and_non_physical_rates_are_reported_as_such():
    """A term fitted to ~0 is not an infinite bandwidth; a rate far above the machine's
    measured peak is not a measurement."""
    from batchlab.calibration.fit.report import rates_table
    from batchlab.calibration.fit.profile_parts import _resolved
    assert _resolved(float("inf"), 25e9) is None and _resolved(9e30, 25e9) is None
    assert _resolved(3e9, 25e9) == 3e9
    eff = make_profile().effective.model_copy(update={
        "kv_bandwidth": None, "flop_rate": 232e9, "measured_copy_bandwidth": 25e9,
        "measured_read_bandwidth": 29e9, "measured_matmul_flops": 86e9})
    text = rates_table(make_profile(effective=eff))
    kv = next(ln for ln in text.splitlines() if "KV-read" in ln)
    assert "not resolved by this grid" in kv and "inf" not in kv
    mm = next(ln for ln in text.splitlines() if "matmul FLOP rate" in ln)
    assert "2.70x" in mm and "not physical" in mm
    assert "not physical" not in rates_table(make_profile())
