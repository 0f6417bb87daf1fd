"""Policies and orders from outside the project (core/plugins.py): the example package of
docs/examples/batchlab-policy-example, found by its entry points or named module:Class,
runs through the command line like a built-in one, and a bad name is a one-line error
naming the option (or file) and the value."""
from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from batchlab.core.orders import ADMISSION_ORDERS, VICTIM_ORDERS, all_orders, lookup
from batchlab.core.plugins import PluginError
from batchlab.core.schedulers import SCHEDULERS, all_policies, policy_class
from batchlab.core.schedulers.continuous import ContinuousScheduler
from tests.helpers import one_line_error, run_cli
from tests.plugin_site import (ADMISSION_SPEC, EXAMPLE, POLICY_SPEC, ROOT, VICTIM_SPEC, registries_restored,
                               write_dist_info)

# A tight KV pool and everything at once: where keeping KV headroom changes the schedule.
TIGHT = ["--num-kv-blocks", "600", "--rate", "inf", "--num-requests", "120", "--policy-param", "headroom=0.5"]


def test_an_entry_point_and_module_class_name_the_same_objects(example):
    assert "kv_headroom" not in SCHEDULERS  # nothing is loaded before it is asked for
    cls = policy_class("kv_headroom")
    assert cls is policy_class(POLICY_SPEC) and issubclass(cls, ContinuousScheduler)
    assert lookup(ADMISSION_ORDERS, "shortest_total", "admission order").key is \
        lookup(ADMISSION_ORDERS, ADMISSION_SPEC, "admission order").key
    assert lookup(VICTIM_ORDERS, "longest_output", "victim order").key is \
        lookup(VICTIM_ORDERS, VICTIM_SPEC, "victim order").key
    # module:Class is resolved, not registered: the listings show installed names only.
    assert POLICY_SPEC not in all_policies() and "kv_headroom" in all_policies()


def test_the_listing_shows_installed_plugins_with_their_parameters(example, capsys):
    code, out, _ = run_cli(["simulate", "--list-policies", "--format", "json"], capsys)
    assert code == 0
    listed = json.loads(out)
    p = listed["policies"]["kv_headroom"]
    assert p["fast_forward"] and [f["name"] for f in p["params"]] == ["headroom"]
    assert "headroom share" in p["description"]
    assert listed["admission_orders"]["shortest_total"] == "shortest prompt + output first, then arrival"
    assert "most output tokens" in listed["victim_orders"]["longest_output"]


def test_the_cli_runs_a_plugin_by_either_name(example, capsys):
    args = ["simulate", *TIGHT, "--admission", "shortest_total", "--preemption", "longest_output",
            "--format", "json", "--policy", f"kv_headroom,{POLICY_SPEC},continuous"]
    code, out, _ = run_cli(args, capsys)
    assert code == 0
    runs = json.loads(out)
    assert runs["kv_headroom"] == runs[POLICY_SPEC]  # one class under two names
    assert runs["kv_headroom"]["preemptions"] != runs["continuous"]["preemptions"]  # and it ran
    code, out, _ = run_cli(["simulate", *TIGHT, "--admission", ADMISSION_SPEC, "--preemption", VICTIM_SPEC,
                            "--format", "json", "--policy", "kv_headroom"], capsys)
    assert code == 0 and json.loads(out)["kv_headroom"] == runs["kv_headroom"]


def test_a_config_file_names_plugins_as_the_options_do(example, tmp_path, capsys):
    cfg = tmp_path / "exp.toml"
    cfg.write_text(f'[workload]\nnum_requests = 40\n[scheduler]\npolicy = "{POLICY_SPEC}"\n'
                   f'admission = "shortest_total"\npreemption = "{VICTIM_SPEC}"\n'
                   f'[scheduler.params]\nheadroom = 0.3\n')
    code, out, _ = run_cli(["simulate", "--config", str(cfg), "--format", "json", "--out", str(tmp_path / "o")],
                           capsys)
    assert code == 0 and json.loads(out)[POLICY_SPEC]["completed"] == 40
    recorded = json.loads((tmp_path / "o" / "config.json").read_text())
    assert recorded["run"]["policies"] == [POLICY_SPEC] and recorded["policy_params"][POLICY_SPEC] == {"headroom": 0.3}


def test_a_fresh_process_finds_the_entry_points_on_its_path(example):
    """The console script as a user runs it: nothing registered in this process helps."""
    out = subprocess.run([sys.executable, "-m", "batchlab", "simulate", "--policy", "kv_headroom",
                          "--admission", "shortest_total", "--preemption", "longest_output",
                          "--num-requests", "30", "--format", "json"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["kv_headroom"]["completed"] == 30


BAD = [
    (["--policy", "nomod_47p:Cls"], "--policy nomod_47p:Cls: no module named 'nomod_47p'"),
    (["--policy", "batchlab_policy_example.headroom:Nope"],
     "--policy batchlab_policy_example.headroom:Nope: batchlab_policy_example.headroom has no attribute 'Nope'"),
    (["--policy", ADMISSION_SPEC], f"--policy {ADMISSION_SPEC}: a function is not a Scheduler subclass"),
    (["--policy", "continuous,batchlab_policy_example:"], "--policy batchlab_policy_example:: expected module:attribute"),
    (["--policy", "nope"], "--policy nope: no such policy; expected one of chunked, continuous, kv_headroom, "
                           "memory_aware, static, or module:Class"),
    (["--admission", POLICY_SPEC], f"--admission {POLICY_SPEC}: class "
                                   f"batchlab_policy_example.headroom.KVHeadroomScheduler is not a function"),
    (["--admission", "fcfs,nope"], "--admission nope: no such admission order; expected one of fcfs, priority, "
                                   "priority_aging, shortest_output, shortest_prompt, shortest_total, or module:function"),
    (["--preemption", "batchlab_policy_example.orders:nope"],
     "--preemption batchlab_policy_example.orders:nope: batchlab_policy_example.orders has no attribute 'nope'"),
]


@pytest.mark.parametrize("args, message", BAD)
def test_a_bad_name_is_one_line_naming_the_option_and_value(example, args, message, capsys):
    code, _, err = run_cli(["simulate", "--num-requests", "5", *args], capsys)
    one_line_error(code, err, message)


def test_a_huge_name_is_not_echoed_whole(capsys):
    code, _, err = run_cli(["simulate", "--policy", "x" * 100_000 + ":Y"], capsys)
    one_line_error(code, err, "--policy xxx", "(100002 characters): no module named 'xxx")
    assert len(err) < 600


def test_a_bad_name_in_a_file_names_the_file_and_the_value(example, tmp_path, capsys):
    cfg = tmp_path / "exp.toml"
    cfg.write_text('[scheduler]\npolicy = "nomod_47p:Cls"\n')
    code, _, err = run_cli(["simulate", "--config", str(cfg)], capsys)
    one_line_error(code, err, f"{cfg}: scheduler: policy 'nomod_47p:Cls': no module named 'nomod_47p'")
    grid = tmp_path / "grid.toml"
    grid.write_text(f'[grid]\npolicy = ["continuous", "{ADMISSION_SPEC}"]\n')
    code, _, err = run_cli(["sweep", "--config", str(grid), "--out", str(tmp_path / "o")], capsys)
    one_line_error(code, err, str(grid), f"policy '{ADMISSION_SPEC}': a function is not a Scheduler subclass")


PLUGIN_MODULE = '''
from batchlab.core.schedulers.base import Scheduler
{body}
'''


@pytest.mark.parametrize("body, message", [
    ("raise RuntimeError('boom at import')", "importing broken_mod failed: RuntimeError: boom at import"),
    ("import missing_dependency_47p", "importing broken_mod failed: ModuleNotFoundError: No module named "
                                      "'missing_dependency_47p'"),
    ("class P(Scheduler):\n    name = 'p'", "class P defines no schedule(now)"),
    ("class P(Scheduler):\n    def schedule(self, now): ...", "class P sets no name"),
    ("P = 3", "an int is not a Scheduler subclass"),
])
def test_what_a_module_class_must_be(body, message, tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_mod.py").write_text(PLUGIN_MODULE.format(body=body))
    monkeypatch.syspath_prepend(str(tmp_path))
    with registries_restored(("broken_mod",)):
        code, _, err = run_cli(["simulate", "--num-requests", "5", "--policy", "broken_mod:P"], capsys)
    one_line_error(code, err, f"--policy broken_mod:P: {message}")


def test_a_broken_entry_point_says_which_and_from_where(tmp_path, monkeypatch, capsys):
    write_dist_info(tmp_path, "ghost-plugin", "1.0", {"batchlab.policies": {"ghost": "ghost_mod:Ghost"},
                                                       "batchlab.victim_orders": {"recent": "ghost_mod:recent"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    with registries_restored(("ghost_mod",)):
        code, _, err = run_cli(["simulate", "--num-requests", "5", "--policy", "ghost"], capsys)
        one_line_error(code, err, "--policy ghost: entry point ghost = ghost_mod:Ghost (batchlab.policies, "
                                  "from ghost-plugin 1.0): no module named 'ghost_mod'")
        # A built-in name is never replaced: asked for, it is the built-in; listed, an error.
        code, _, _ = run_cli(["simulate", "--num-requests", "5", "--preemption", "recent"], capsys)
        assert code == 0
        code, _, err = run_cli(["simulate", "--list-policies"], capsys)
        one_line_error(code, err, "ghost")
    (tmp_path / "ghost_mod.py").write_text("def recent(s):\n    return (0,)\n")
    with registries_restored(("ghost_mod",)), pytest.raises(PluginError, match="takes the name of a built-in"):
        all_orders(VICTIM_ORDERS, "preemption victim order")


def test_the_docs_show_the_example_packages_entry_points():
    """docs/policies.md's pyproject snippet is the example's own."""
    page = (ROOT / "docs/policies.md").read_text()
    snippet = next(b for b in page.split("```toml\n")[1:] if "batchlab.policies" in b).split("```")[0]
    source = (EXAMPLE / "pyproject.toml").read_text().splitlines()
    assert all(line in source for line in snippet.splitlines() if line.strip())
    declared = tomllib.loads(snippet)["project"]["entry-points"]
    assert set(declared) == {"batchlab.policies", "batchlab.admission_orders", "batchlab.victim_orders"}
    assert Path(EXAMPLE / "batchlab_policy_example" / "headroom.py").is_file()
