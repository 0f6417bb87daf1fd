"""Load: 64 concurrent streaming clients (batchlab replay, a closed loop of 64 users)
over 256 short requests against one `batchlab serve`: no error, nothing lost, and the
server's counters agree with what the clients received."""
from __future__ import annotations

import csv
import json

import httpx
import pytest

from tests.serve_helpers import ServeProcess, batchlab

pytestmark = [pytest.mark.slow, pytest.mark.backend]
N, USERS = 256, 64


def test_64_concurrent_streams_lose_nothing(tmp_path):
    srv = ServeProcess("--model", "batchlab-tiny", "--max-num-seqs", "64", out=tmp_path / "serve")
    try:
        srv.wait_ready()
        p = batchlab("replay", "--endpoint", srv.base, "--workload", "uniform", "--num-requests", str(N),
                     "--max-concurrency", str(USERS), "--rate", "inf", "--length-scale", "16", "--out", str(tmp_path / "r"),
                     "--no-progress", "--request-timeout", "120")
        assert p.returncode == 0, p.stderr
        assert f"all {N} requests finished" in p.stderr
        text = httpx.get(f"{srv.base}/metrics", timeout=10).text
        generated = next(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
                         if ln.startswith("vllm:generation_tokens_total"))
    finally:
        assert srv.stop() == 0
    bench = json.loads((tmp_path / "r" / "result.json").read_text())
    assert bench["completed"] == N and bench["failed"] == 0
    assert bench["max_concurrent_requests"] == USERS
    assert bench["output_lens"] == [8] * N and all(len(i) == 7 for i in bench["itls"])
    assert generated == 8 * N
    served = list(csv.DictReader(open(tmp_path / "serve" / "continuous" / "requests.csv")))
    assert len(served) == N and {r["status"] for r in served} == {"finished"}
    assert len(set(bench["response_ids"])) == N  # 256 distinct server requests
