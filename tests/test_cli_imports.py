"""The command line loads what a command needs and nothing more: `batchlab --help` imports
no command module, `batchlab CMD` imports CMD's module only, building any command's parser
imports no heavy module, `batchlab simulate` loads neither plots, nor torch, nor the
studies, and no command module imports another (what two share is a library module).
Checked in a fresh interpreter, by the modules it holds, not by timing."""
from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

COMMANDS = Path(__file__).resolve().parents[1] / "experiments" / "commands"
# Loaded only by the commands (or options) that use them.
HEAVY = ("matplotlib", "torch", "scipy.optimize", "httpx")
# Besides those, what a plain simulation never needs.
NOT_FOR_SIMULATE = HEAVY + ("scipy", "pyarrow", "tqdm", "multiprocessing", "batchlab.core.cost.profile",
                            "batchlab.experiments.studies", "batchlab.experiments.capacity.search",
                            "batchlab.experiments.validation", "batchlab.backend")


def _loaded_after(code: str, names: tuple[str, ...]) -> list[str]:
    """Which of `names` a fresh interpreter holds after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {names!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _command_modules() -> tuple[str, ...]:
    return tuple(f"batchlab.experiments.commands.{p.stem}" for p in sorted(COMMANDS.glob("*.py"))
                 if p.stem != "__init__")


def test_building_the_parser_imports_no_heavy_module():
    """Every command's parser at once (its module imported): `batchlab CMD --help` is light."""
    code = "from batchlab.experiments.cli import build_parser\nbuild_parser()"
    assert _loaded_after(code, HEAVY) == []


def _listed(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """(command, help line) as `batchlab --help` lists them."""
    sub, = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [(a.dest, a.help) for a in sub._choices_actions]


def test_the_command_list_imports_no_command_module():
    code = ("from batchlab.experiments.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0")
    assert _loaded_after(code, _command_modules()) == []
    # ... and lists each command with the help line its module gives it
    from batchlab.experiments.cli import build_parser
    from batchlab.experiments.commands import COMMANDS as HELP
    assert _listed(build_parser(())) == _listed(build_parser()) == list(HELP.items())


def test_a_command_imports_its_module_only():
    code = ("from batchlab.experiments.cli import main\n"
            "assert main(['workload', 'stats', '--num-requests', '3']) == 0")
    assert _loaded_after(code, _command_modules()) == ["batchlab.experiments.commands.workload"]


def test_simulate_loads_no_plotting_backend_or_study():
    code = ("from batchlab.experiments.cli import main\n"
            "assert main(['simulate', '--num-requests', '3', '--policy', 'continuous']) == 0")
    assert _loaded_after(code, NOT_FOR_SIMULATE) == []


def test_simulate_with_a_plot_loads_matplotlib():
    """The converse, so that the check above cannot pass by looking at the wrong names."""
    code = ("from batchlab.experiments.cli import main\n"
            "import tempfile\n"
            "d = tempfile.mkdtemp()\n"
            "assert main(['simulate', '--num-requests', '3', '--policy', 'continuous', '--plot', d]) == 0")
    assert _loaded_after(code, ("matplotlib",)) == ["matplotlib"]


def test_no_command_imports_another():
    names = {p.stem for p in COMMANDS.glob("*.py")} - {"__init__"}
    assert {"simulate", "run", "calibrate", "validate", "workload", "experiment", "capacity", "sweep",
            "serve", "replay"} <= names
    for path in COMMANDS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            wrong = [t for t in targets if t.startswith("batchlab.experiments.commands")
                     and t.split(".")[-1] in names - {path.stem}]
            assert not wrong, f"{path.name} imports the command module {wrong[0]}"
