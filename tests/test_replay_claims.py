"""`batchlab replay` checks what a server claims against what it received: a reply whose
usage says -5 tokens, 60 while 6 came, a count as a string, a prompt or cache size that
is not the prompt's, or more tokens than were asked for, is a row marked `invalid` with
the reason, counted apart in the summary and result.json, and never averaged in. The
lying server is a subprocess this test starts (127.0.0.1) and stops by its process id."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from batchlab.experiments.cli import main
from tests.fake_server import LIES
from tests.serve_helpers import ROOT

N = 2 * len(LIES)  # every kind twice


@pytest.fixture
def lying_server():
    proc = subprocess.Popen([sys.executable, "-m", "tests.fake_server"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_false_claims_are_invalid_rows_counted_apart(capsys, tmp_path, lying_server):
    # max concurrency 1: requests reach the server in workload order, one kind after another
    rc = main(["replay", "--model", "m", "--workload", "uniform", "--num-requests", str(N),
               "--rate", "inf", "--max-concurrency", "1", "--no-progress", "--format", "json",
               "--endpoint", lying_server, "--out", str(tmp_path)])
    out = capsys.readouterr()
    assert rc == 1 and "Traceback" not in out.err
    with open(tmp_path / "replay" / "requests.csv") as f:
        rows = list(csv.DictReader(f))
    status = [r["status"] for r in rows]
    assert status == (["finished"] + ["invalid"] * (len(LIES) - 1)) * 2
    reasons = [r["reject_reason"] for r in rows[1:len(LIES)]]
    for words, reason in zip(["reported -5 completion tokens", "completion tokens but streamed",
                              "prompt tokens for a prompt of", "not a count", "cached tokens of a",
                              "for a request of max_tokens="], reasons):
        assert reason.startswith("invalid: ") and words in reason, reason
    summary = json.loads(out.out)["replay"]
    assert (summary["completed"], summary["invalid"], summary["failed"]) == (2, N - 2, 0)
    e2e = [float(r["finish_s"]) - float(r["arrival_s"]) for r in rows if r["status"] == "finished"]
    assert summary["mean_e2el_ms"] == pytest.approx(1000 * np.mean(e2e))  # only valid rows
    assert summary["total_output_tokens"] == sum(int(r["output_len"]) for r in rows
                                                 if r["status"] == "finished")
    line = [ln for ln in out.err.splitlines() if "invalid" in ln]
    assert len(line) == 1 and f"{N - 2} of {N} requests invalid: " in line[0]
    bench = json.loads((tmp_path / "result.json").read_text())
    assert (bench["completed"], bench["invalid"], bench["failed"]) == (2, N - 2, 0)
