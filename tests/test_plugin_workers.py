"""A plug-in policy (docs/examples/batchlab-policy-example) wherever batchlab runs a
policy: process-pool workers, forked and spawned (a spawned one starts from nothing and
resolves the names in the config it receives), Dask workers, the torch backend, and the
property tests, which draw every installed policy and order."""
from __future__ import annotations

import csv
import json
import multiprocessing
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest

from batchlab.experiments.executor import run_all
from batchlab.experiments.sweep.grid import load_sweep
from batchlab.experiments.sweep.run import run_point
from tests.helpers import SMALL_RUN, SWEEP_BASE, run_cli
from tests.plugin_site import POLICY_SPEC, ROOT, VICTIM_SPEC

# Both names of the plug-in policy, with a plug-in admission and victim order.
GRID = SWEEP_BASE + f"""
[scheduler]
admission = "shortest_total"
preemption = "{VICTIM_SPEC}"
num_kv_blocks = 300
[grid]
policy = ["kv_headroom", "{POLICY_SPEC}"]
"scheduler.max_num_seqs" = [8, 64]
"""
METRICS = ("p99_ttft_ms", "p99_tpot_ms", "output_throughput", "passes")


def _grid(tmp_path) -> str:
    path = tmp_path / "grid.toml"
    path.write_text(GRID)
    return str(path)


def _rows(out_dir) -> list[dict]:
    return list(csv.DictReader(open(out_dir / "results.csv")))


def _same_under_both_names(rows: list[dict]) -> None:
    by_name = {}
    for r in rows:
        by_name.setdefault(r["scheduler.policy"], []).append({m: r[m] for m in METRICS})
    assert by_name["kv_headroom"] == by_name[POLICY_SPEC] and len(by_name["kv_headroom"]) == 2


def test_a_process_pool_runs_plugins_as_one_process_does(example, tmp_path, capsys):
    grid = _grid(tmp_path)
    for workers in ("1", "2"):
        code, _, err = run_cli(["sweep", "--config", grid, "--out", str(tmp_path / workers), "--workers", workers],
                               capsys)
        assert code == 0, err
    serial, pool = _rows(tmp_path / "1"), _rows(tmp_path / "2")
    assert serial == pool
    _same_under_both_names(serial)


def test_spawned_workers_resolve_the_names_they_receive(example, tmp_path):
    """A spawned worker inherits no registry: only the path (as a Dask worker does)."""
    sweep = load_sweep(_grid(tmp_path))
    tasks = [(p, sweep.settings) for p in sweep.points]
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        spawned = run_all(pool, run_point, tasks)
    assert json.dumps(spawned) == json.dumps([run_point(t) for t in tasks])  # NaN-safe


def test_capacity_searches_a_plugin_in_a_pool(example, capsys):
    args = ["capacity", "max-rate", "--workload", "chat", "--num-requests", "200", "--rate", "10",
            "--slo-ttft-ms", "1000", "--slo-tpot-ms", "60", "--tolerance", "0.1", "--format", "json",
            "--policy", f"kv_headroom,{POLICY_SPEC}", "--admission", "shortest_total", "--workers", "2"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    answers = {a["label"]: a["answer"] for a in json.loads(out)["answers"]}
    assert answers["kv_headroom"] == answers[POLICY_SPEC] and answers["kv_headroom"] > 0


@pytest.mark.slow
@pytest.mark.heavy
def test_dask_workers_run_plugins_as_one_process_does(example, tmp_path, capsys):
    pytest.importorskip("distributed")
    grid = _grid(tmp_path)
    for args in (["--workers", "1"], ["--dask", "local", "--workers", "2"]):
        code, out, err = run_cli(["sweep", "--config", grid, "--out", str(tmp_path / args[0]), *args], capsys)
        assert code == 0, err
    assert "ran on Dask LocalCluster (2 workers)" in out
    assert _rows(tmp_path / "--dask") == _rows(tmp_path / "--workers")


@pytest.mark.backend
def test_the_backend_serves_under_a_plugin_policy(example, capsys):
    code, out, err = run_cli(["run", "--policy", POLICY_SPEC, "--admission", "shortest_total", *SMALL_RUN,
                              "--format", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)[POLICY_SPEC]["completed"] == 6


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.parametrize("focus, tests", [
    ("kv_headroom", ["tests/test_scheduler_properties.py", "tests/test_fast_forward.py"]),
    (POLICY_SPEC, ["tests/test_scheduler_properties.py"])])
def test_the_property_tests_draw_an_installed_plugin(example, focus, tests):
    """The scheduler invariants (and the fast-forward claim) checked on the plug-in, by
    its installed name or as module:Class; the draws test among them asserts that every
    installed order was drawn."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests,
                          "--policy", focus, "-k", "not memory_aware"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:]
    summary = out.stdout.strip().splitlines()[-1]
    assert "passed" in summary and "failed" not in summary
