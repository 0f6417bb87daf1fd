"""Plain helpers the tests share (fixtures, which set something up, are in conftest.py)."""
from __future__ import annotations

import pytest
from batchlab.core.workload import traces_dir
from batchlab.experiments.cli import main


def run_cli(args, capsys):
    """The CLI in-process: (exit code, stdout, stderr)."""
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code, err, *words):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("batchlab: error:"), err
    for w in words:
        assert w in lines[0], (w, lines[0])


def shared(name: str):
    path = traces_dir() / name
    if not path.exists():
        pytest.skip(f"shared trace {path} not present (set BATCHLAB_TRACES to its folder)")
    return path
