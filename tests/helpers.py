"""Plain helpers the tests share (fixtures, which set something up, are in conftest.py)."""
from __future__ import annotations

import contextlib
import io

import pytest

from batchlab.core.workload import traces_dir
from batchlab.experiments.cli import main

# A few short requests: seconds on the tiny model (`batchlab run`; `batchlab validate`).
SMALL_RUN = ["--num-requests", "6", "--rate", "inf", "--max-prompt-len", "48", "--max-output-len", "8",
             "--kv-memory", "16MiB", "--no-progress"]
SMALL_VALIDATE = ["--num-requests", "6", "--rate", "40", "--max-prompt-len", "48", "--max-output-len", "8",
                  "--kv-memory", "16MiB", "--threads", "1", "--no-progress"]

# A sweep's [workload] and SLO (batchlab sweep; a grid and [sweep] follow).
SWEEP_BASE = """
[workload]
source = "chat"
num_requests = 200
rate = 10.0
[run.slo]
ttft_ms = 1000.0
tpot_ms = 60.0
"""


def run_cli(args, capsys):
    """The CLI in-process: (exit code, stdout, stderr)."""
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def cli(args: list[str]) -> tuple[int, str, str]:
    """The CLI in-process without capsys (usable in module fixtures): (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


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
