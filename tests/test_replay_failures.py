"""`batchlab replay` against servers that fail: nothing listening, HTTP 500, a stream cut
mid-way, a stream that ends without [DONE]. Each request becomes a failed row with its
reason, the command prints a one-line summary and exits 1, never a traceback. The
servers here are small local HTTP servers started by the test (loopback only)."""
from __future__ import annotations

import csv
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from batchlab.experiments.cli import main
from tests.serve_helpers import free_port

CHUNK = 'data: {"id":"cmpl-9","choices":[{"index":0,"text":"x","finish_reason":null}]}\n\n'


class _Failing(BaseHTTPRequestHandler):
    """POST /v1/completions answers by request number: 500, a chunked stream cut after two
    tokens, a stream that ends cleanly but without [DONE], then a good stream of 3."""
    count = 0
    lock = threading.Lock()

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        with _Failing.lock:
            n, _Failing.count = _Failing.count, _Failing.count + 1
        kind = n % 4
        if kind == 0:
            body = b'{"error": {"message": "boom", "type": "server_error"}}'
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = [CHUNK] * (2 if kind < 3 else 3) + (["data: [DONE]\n\n"] if kind == 3 else [])
        for e in events:
            data = e.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        if kind == 1:  # cut: close without the last chunk of the chunked body
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def failing_server():
    _Failing.count = 0
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def replay(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["replay", "--model", "m", "--workload", "uniform", "--num-requests", "8",
               "--rate", "inf", "--no-progress", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def rows(out_dir) -> list[dict]:
    return list(csv.DictReader(open(out_dir / "replay" / "requests.csv")))


def test_nothing_listening_gives_failed_rows_and_one_line(capsys, tmp_path):
    rc, _, err = replay(capsys, "--endpoint", f"http://127.0.0.1:{free_port()}", "--out", str(tmp_path))
    assert rc == 1 and "Traceback" not in err
    assert "8 of 8 requests failed: 8 x cannot connect to" in err
    assert [r["status"] for r in rows(tmp_path)] == ["failed"] * 8
    assert all("cannot connect" in r["reject_reason"] for r in rows(tmp_path))
    bench = json.loads((tmp_path / "result.json").read_text())
    assert bench["completed"] == 0 and bench["failed"] == 8 and all(bench["errors"])


def test_500_cut_streams_and_missing_done(capsys, tmp_path, failing_server):
    rc, out, err = replay(capsys, "--endpoint", failing_server, "--out", str(tmp_path))
    assert rc == 1 and "Traceback" not in err + out
    reasons = sorted(r["reject_reason"] for r in rows(tmp_path) if r["status"] == "failed")
    assert len(reasons) == 6 and sum(r["status"] == "finished" for r in rows(tmp_path)) == 2
    assert sum(r.startswith("HTTP 500: boom") for r in reasons) == 2
    assert sum(r.startswith("the server closed the stream mid-way after 2 tokens") for r in reasons) == 2
    assert sum(r == "the stream ended without [DONE] after 2 tokens" for r in reasons) == 2
    line = [ln for ln in err.splitlines() if "requests failed" in ln]
    assert len(line) == 1 and line[0].startswith("6 of 8 requests failed: ")
    done = [r for r in rows(tmp_path) if r["status"] == "finished"]
    assert all(r["output_len"] == "3" for r in done)  # what the server sent, not what was asked


def test_bad_endpoint_and_options_are_one_line_errors(capsys):
    assert replay(capsys, "--endpoint", "localhost:8000")[0] == 2
    rc, _, err = replay(capsys, "--endpoint", "http://127.0.0.1:1", "--request-timeout", "0")
    assert rc == 2 and "--request-timeout" in err
    with pytest.raises(SystemExit) as e:  # argparse: replay has no scheduler options
        replay(capsys, "--endpoint", "http://127.0.0.1:1", "--max-num-seqs", "4")
    assert e.value.code == 2 and "unrecognized arguments: --max-num-seqs" in capsys.readouterr().err
