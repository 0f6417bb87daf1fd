"""The timing sweep on the real backend (batchlab-tiny, a tiny grid: seconds): it writes
every timing as it goes, resumes after an interruption, and calibrate() ties it up."""
from __future__ import annotations

import json
from collections import Counter

import pytest

pytest.importorskip("torch")

from batchlab.backend.runtime import Runtime  # noqa: E402
from batchlab.calibration import calibrate  # noqa: E402
from batchlab.calibration.sweep.grid import Grid, GridPoint, blocks_needed, tiny_grid  # noqa: E402
from batchlab.calibration.sweep.runner import Sweep, measurements_path, read_records, widest_points  # noqa: E402
from batchlab.core.cost.profile import load_profile, PROFILE_VERSION
from tests.checkpoints import tiny_checkpoint  # noqa: E402

IDENT = {"model": "batchlab-tiny", "device": "cpu", "threads": 1, "dtype": "float32",
         "matmul": "x", "block_size": 16}
GRID = Grid([GridPoint(1, 16), GridPoint(4, 40), GridPoint(chunk=24), GridPoint(2, 16, 8, 8)],
            rounds=3)


@pytest.fixture(scope="module")
def engine():
    rt = Runtime("batchlab-tiny", threads=1, kv_memory="16MiB")
    eng = rt.engine(blocks_needed(widest_points(GRID), 16), 16)
    eng.warmup()
    return eng


def timed_counts(path, ident=IDENT) -> Counter:
    return Counter(r["key"] for r in read_records(path, ident) if r["round"] >= 0)


def test_sweep_records_every_timing_with_its_features(engine, tmp_path):
    path = tmp_path / "m.jsonl"
    n = Sweep(engine, GRID, path, IDENT).run()
    assert n == 3 * len(GRID.points)
    assert timed_counts(path) == {p.key: 3 for p in GRID.points}
    recs = read_records(path, IDENT)
    assert sum(r["round"] == -1 for r in recs) == len(GRID.points)  # one warm-up each
    rec = next(r for r in recs if r["key"] == "m2x16+p8@8")
    assert rec["t"] > 0 and rec["features"]["decode_tokens"] == 2 and rec["features"]["prefill_tokens"] == 8
    assert Sweep(engine, GRID, path, IDENT).run() == 0  # complete: nothing to redo


def test_interrupted_sweep_keeps_its_timings_and_resumes(engine, tmp_path):
    path = tmp_path / "m.jsonl"
    calls = 0

    def reference() -> float:  # called before each timed step: interrupt at the 5th
        nonlocal calls
        calls += 1
        if calls == 5:
            raise KeyboardInterrupt
        return 1.0

    with pytest.raises(KeyboardInterrupt):
        Sweep(engine, GRID, path, IDENT, reference).run()
    assert sum(timed_counts(path).values()) == 4
    with open(path, "a") as f:
        f.write('{"torn": ')  # a kill mid-write leaves half a line
    assert Sweep(engine, GRID, path, IDENT).run() == 3 * len(GRID.points) - 4
    assert timed_counts(path) == {p.key: 3 for p in GRID.points}
    # another thread count is another sweep: it starts from scratch, in the same file
    other = {**IDENT, "threads": 2}
    assert not timed_counts(path, other)


def test_cheap_points_get_more_rounds(engine, tmp_path):
    # How many rounds a step of a given time gets: pure arithmetic, no clock.
    g = Grid(GRID.points[:2], rounds=2, target_s=0.05, max_rounds=6)
    assert [g.rounds_for(t) for t in (1.0, 0.025, 0.01, 1e-6, None)] == [2, 2, 5, 6, 2]
    # A target no step of batchlab-tiny comes near on any machine, however loaded (a
    # target of 0.05 s left the points 2 rounds where a busy core made a step 25 ms).
    grid = Grid(GRID.points[:2], rounds=2, target_s=1000.0, max_rounds=6)
    Sweep(engine, grid, tmp_path / "m.jsonl", IDENT).run()
    counts = timed_counts(tmp_path / "m.jsonl")
    assert all(2 <= c <= 6 for c in counts.values()) and max(counts.values()) > 2
    # the count is fixed by each point's first timing: a re-run has nothing left to do
    assert Sweep(engine, grid, tmp_path / "m.jsonl", IDENT).run() == 0


@pytest.mark.slow  # a real calibration or a full study: tens of seconds
def test_calibrate_saves_a_loadable_profile(profile_file, tmp_path):
    """The suite's calibration of the tiny model on the quick grid (tests/conftest.py)."""
    out = profile_file
    q = load_profile(out)
    q.save(tmp_path / "again.json")
    assert load_profile(tmp_path / "again.json") == q
    assert q.model.name == "batchlab-tiny" and q.device.threads == 1 and q.device.kind == "cpu"
    # the capacity a backend run gets from the same budget (the CPU's default, 1 GiB)
    assert q.num_kv_blocks == 2**30 // (2 * 6 * 4 * 32 * 4 * 16)
    assert q.measurements_path == str(measurements_path(out)) and measurements_path(out).exists()
    assert len(q.measurements) == len(tiny_grid().points)
    assert (q.grid.name, q.grid.points) == ("quick", len(tiny_grid().points))  # how it was measured
    assert q.fit.heldout.n == len(tiny_grid().heldout()) and q.fit.heldout.median_ape is not None
    assert q.effective.measured_read_bandwidth > 0 and q.effective.measured_matmul_flops > 0
    # the serving phase: steps in context, the sweep's fit refined to them
    assert q.serving["steps"] > 20 and q.serving["after"]["after_idle"]["n"] >= 5
    assert q.runs == ["calibration serving phase"] and q.version == PROFILE_VERSION == 6
    # both cost forms fitted and refined on the serving phase; the GPU form prices it
    assert q.form == "gpu" and q.gpu_form is not None and q.gpu_form.after_idle_s.value >= 0
    assert "other_form" in q.serving
    lines = measurements_path(out).read_text().splitlines()
    assert all(json.loads(line)["model"] == "batchlab-tiny" for line in lines)


@pytest.mark.slow  # a real calibration or a full study: tens of seconds
def test_calibrate_warns_when_the_grid_exceeds_the_context_limit(tmp_path):
    """The quick grid reaches 84 tokens (its prefill points timed a few tokens longer, in
    fresh shapes); a checkpoint limited to 64 is told so. No serving phase: the warning is
    the sweep's, and this checkpoint's steps are so cheap that a fresh process's first
    execution of each distinct prompt length takes over 2x their price (a CI run refused
    the phase as contended twice)."""
    from dataclasses import replace

    from batchlab.calibration.sweep.contention import ContendedCalibration
    from batchlab.calibration.sweep.grid import max_context
    tiny_checkpoint(tmp_path / "ckpt", max_positions=64)
    said: list[str] = []
    try:
        calibrate(str(tmp_path / "ckpt"), "cpu", 1, None, replace(tiny_grid(), serve_s=0.0), kv_memory="16MiB",
                  progress=False, log=said.append)
    except ContendedCalibration:  # a loaded machine's timings refused by the fit: the warning came before
        pass
    assert not any("serving phase" in m for m in said), said
    longest = max_context(widest_points(tiny_grid()))
    assert longest == 84
    assert any("warning" in m and f"up to {longest} tokens" in m and "context limit of 64" in m
               for m in said), said
