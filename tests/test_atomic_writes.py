"""Files are written whole or not at all (core/atomic.py): a failed write keeps the
previous file and leaves no temporary one; a full disk during `simulate --out` is one
line naming the file, exit 2; and no module writes a table, summary or figure any other
way (a scan of the source)."""
from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest

from batchlab.core import atomic
from batchlab.experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--workload", "uniform", "--num-requests", "30", "--rate", "20", "--policy", "continuous"]


def test_a_failed_write_keeps_the_previous_file(tmp_path):
    path = tmp_path / "t.csv"
    atomic.write_text(path, "a,b\n1,2\n")
    with pytest.raises(RuntimeError), atomic.atomic_open(path) as f:
        f.write("a,b\n3,")
        raise RuntimeError("killed mid-row")
    assert path.read_text() == "a,b\n1,2\n" and [p.name for p in tmp_path.iterdir()] == ["t.csv"]
    with pytest.raises(atomic.WriteError, match=r"cannot write .*missing/t.csv: "):
        atomic.write_text(tmp_path / "missing" / "t.csv", "x")


def test_a_full_disk_is_one_line_and_leaves_the_last_good_files(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert main(["simulate", *SMALL, "--out", str(out)]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    assert main(["simulate", *SMALL, "--seed", "9", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert re.match(r"batchlab: error: cannot write \S+: the disk is full", err), err
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert not [p for p in after if p.name.endswith(atomic.TEMP_SUFFIX)]
    # every file there is a whole one: the earlier run's, or the new config.json was not written
    assert {p: b for p, b in after.items()} == {p: b for p, b in before.items() if p in after}


def test_an_oserror_of_a_full_disk_outside_the_helper_is_one_line(capsys, monkeypatch):
    from batchlab.experiments.commands import simulate

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device", "/x/y.png")

    monkeypatch.setattr(simulate, "run", full)  # add_parser reads it when main builds the parser
    assert main(["simulate"]) == 2
    assert capsys.readouterr().err == "batchlab: error: cannot write /x/y.png: No space left on device\n"


PACKAGE_FOLDERS = ("core", "sim", "backend", "calibration", "experiments")
# Writes that are not whole files: append logs whose reader skips a cut last line.
APPEND_LOGS = {"experiments/sweep/store.py", "calibration/sweep/runner.py", "experiments/jsonl_log.py"}
WRITES = re.compile(r"\.write_text\(|\.write_bytes\(|open\([^)]*[\"'][wa]b?[\"']|\.savefig\(|\.to_csv\(|"
                    r"np\.save|json\.dump\(|pq\.write_table\(")


def test_every_file_writer_goes_through_the_atomic_helper():
    offenders = []
    # The package's own folders only: a checkout may hold virtual environments of any name.
    paths = [p for folder in PACKAGE_FOLDERS for p in (ROOT / folder).glob("**/*.py")]
    for path in sorted(paths):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "core/atomic.py" or rel in APPEND_LOGS:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if WRITES.search(line) and "atomic." not in line and "lambda tmp" not in line:
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert offenders == []
