"""Long runs lose nothing: every executor hands each result over as it finishes (a
serial one before the next task starts), so sweep and capacity keep each finished point
or search through an interrupt at any worker count, and what Ctrl-C names exists; a
local pool's workers end with their parent, even one killed with kill -9."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from batchlab.experiments.cli import main
from batchlab.experiments.executor import SerialExecutor, run_all
from batchlab.experiments.jsonl_log import read_jsonl
from tests.helpers import SWEEP_BASE
from tests.serve_helpers import ROOT

GRID = SWEEP_BASE + """[grid]
"scheduler.max_num_seqs" = [2, 4, 8, 16, 32, 64]
[sweep]
gpu_hour_price = 2.0
"""


def test_a_serial_run_hands_each_result_over_before_the_next_task():
    events = []

    def task(i):
        events.append(f"run {i}")
        return i * i

    out = run_all(SerialExecutor(), task, [1, 2, 3], lambda i, r: events.append(f"done {i}={r}"))
    assert out == [1, 4, 9]
    assert events == ["run 1", "done 0=1", "run 2", "done 1=4", "run 3", "done 2=9"]


def _interrupt_after(monkeypatch, module, name: str, n: int) -> None:
    real, calls = getattr(module, name), []

    def counted(*a, **k):
        calls.append(1)
        if len(calls) > n:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(module, name, counted)


def test_an_interrupted_serial_sweep_keeps_its_points_and_names_a_file_that_exists(
        tmp_path, capsys, monkeypatch):
    from batchlab.experiments.sweep import run
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    _interrupt_after(monkeypatch, run, "run_point", 3)
    assert main(["sweep", "--config", str(grid), "--out", str(tmp_path / "o"), "--workers", "1"]) == 130
    err = capsys.readouterr().err
    kept = tmp_path / "o" / "points.jsonl"
    assert f"3 of 6 points are kept in {kept}" in err and err.count("\n") == 1
    assert len(kept.read_text().splitlines()) == 3


def test_an_interrupted_capacity_run_keeps_each_finished_search(tmp_path, capsys, monkeypatch):
    from batchlab.experiments.capacity import tasks
    _interrupt_after(monkeypatch, tasks, "run_task", 1)
    args = ["capacity", "replicas", "--workload", "chat", "--num-requests", "200", "--rate", "20",
            "--policy", "chunked", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "60", "--workers", "1",
            "--candidate", "llama-3-8b:1:a100-80gb,llama-3-8b:1:l4", "--out", str(tmp_path)]
    assert main(args) == 130
    err = capsys.readouterr().err
    kept = tmp_path / "searches.jsonl"
    assert str(kept) in err
    rows = read_jsonl(kept)
    assert len(rows) == 1 and rows[0]["label"] and rows[0]["points"] and rows[0]["task"] == 0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_pool_workers_end_when_the_sweep_is_killed(tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID.replace("num_requests = 200", "num_requests = 20000"))
    proc = subprocess.Popen([sys.executable, "-m", "batchlab", "sweep", "--config", str(grid), "--out",
                             str(tmp_path / "o"), "--workers", "2"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        workers: list[int] = []
        deadline = time.monotonic() + 120
        while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True,
                                 check=False).stdout
            workers = [int(p) for p in out.split()]
        assert len(workers) == 2, "the pool's workers never started"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    deadline = time.monotonic() + 30
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [w for w in workers if _alive(w)]
    for w in left:  # clean up before failing
        os.kill(w, signal.SIGKILL)
    assert left == []


@pytest.mark.backend
@pytest.mark.parametrize("timed", [False, True])
def test_ctrl_c_in_calibrate_names_only_a_timings_file_that_exists(timed, tmp_path, capsys, monkeypatch):
    from batchlab.calibration.sweep import run as calibration_run
    from batchlab.calibration.sweep.runner import measurements_path
    out = tmp_path / "p.json"

    def interrupted(*a, **k):
        if timed:
            measurements_path(out).write_text('{"key": "a", "round": 0, "t": 0.001}\n')
        raise KeyboardInterrupt

    monkeypatch.setattr(calibration_run, "calibrate", interrupted)
    assert main(["calibrate", "--model", "batchlab-tiny", "--out", str(out), "--no-progress"]) == 130
    err = capsys.readouterr().err
    if timed:
        assert f"timings so far are kept in {measurements_path(out)}" in err
    else:
        assert "before any timing was taken; nothing was written" in err
        assert not measurements_path(out).exists() and str(measurements_path(out)) not in err


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process, from /proc (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_ctrl_c_in_a_run_split_over_workers_keeps_what_the_groups_simulated(tmp_path):
    """Ctrl-C (SIGINT to the terminal's process group) while `simulate --workers 2` runs
    its replicas in two processes: each group keeps what it simulated and the parent waits
    for them, so the run's rows so far are written and marked interrupted, exit 130, as
    one process does. The signal goes once both workers have run a while (1.5 CPU-s each,
    past their start-up): 2,000,000 requests take far longer than that on any machine."""
    n = 2_000_000
    proc = subprocess.Popen([sys.executable, "-m", "batchlab", "simulate", "--workload", "chat",
                             "--num-requests", str(n), "--rate", "2000", "--replicas", "4", "--workers", "2",
                             "--policy", "chunked", "--no-step-table", "--out", str(tmp_path / "o"),
                             "--format", "json"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        workers: list[int] = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True,
                                 check=False).stdout
            workers = [int(p) for p in out.split()]
            if len(workers) == 2 and min(_cpu_s(w) for w in workers) >= 1.5:
                break
        assert len(workers) == 2 and proc.poll() is None, "the run ended, or its workers never started"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.returncode == 130, err
    assert "(interrupted)" in err
    out = tmp_path / "o"
    meta = json.loads((out / "meta.json").read_text())["chunked"]
    completed = json.loads((out / "summary.json").read_text())["chunked"]["completed"]
    rows = len((out / "chunked" / "requests.csv").read_text().splitlines()) - 1
    assert meta["interrupted"] and meta["replicas"] == 4
    assert 0 < completed < n and completed <= rows
