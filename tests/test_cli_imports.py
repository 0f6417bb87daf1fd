"""The command line loads what a command needs and nothing more: building the parser
imports no heavy module, `batchlab simulate` loads neither plots, nor torch, nor the
studies, and no command module imports another (what two share is a library module).
Checked in a fresh interpreter, by the modules it holds, not by timing."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

COMMANDS = Path(__file__).resolve().parents[1] / "experiments" / "commands"
# Loaded only by the commands (or options) that use them.
HEAVY = ("matplotlib", "torch", "scipy.optimize", "httpx")
# Besides those, what a plain simulation never needs.
NOT_FOR_SIMULATE = HEAVY + ("scipy", "pyarrow", "tqdm", "multiprocessing", "batchlab.core.profile",
                            "batchlab.experiments.studies", "batchlab.experiments.capacity.search",
                            "batchlab.experiments.validation", "batchlab.backend")


def _loaded_after(code: str, names: tuple[str, ...]) -> list[str]:
    """Which of `names` a fresh interpreter holds after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {names!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_building_the_parser_imports_no_heavy_module():
    code = "from batchlab.experiments.cli import build_parser\nbuild_parser()"
    assert _loaded_after(code, HEAVY) == []


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
