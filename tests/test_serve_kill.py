"""`batchlab serve` against clients that misbehave and a SIGKILL (issue 46, items 4 and 5).

One server (127.0.0.1, --port 0, --out DIR). Garbage, a request head that never ends,
a body cut off by a closed connection, a body that stalls and a stream left mid-way each
cost the server one log line, never a traceback, and free the connection within a few
seconds of the deadline (HEADER_TIMEOUT_S, BODY_STALL_S). Then 32 clients stream, the
server is killed with SIGKILL: DIR holds a row for every request finished before, and a
restart into DIR is refused with the way forward. Requests and times are bounded."""
from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time

import httpx
import pytest

from tests.serve_helpers import ServeProcess, batchlab

pytestmark = [pytest.mark.slow, pytest.mark.backend]
MODEL = "batchlab-tiny"
CLIENTS = 32
SLACK_S = 20  # beyond the server's deadline: a loaded machine's event loop is late, never this late


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ServeProcess("--model", MODEL, "--max-num-seqs", str(CLIENTS), "--num-kv-blocks", "512",
                       out=tmp_path_factory.mktemp("k") / "out", port=0)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()  # by its pid; a no-op once the test has killed it


def deadlines():
    from batchlab.backend.server.app import BODY_STALL_S  # lazy: torch
    from batchlab.backend.server.http_protocol import HEADER_TIMEOUT_S  # lazy: torch
    return HEADER_TIMEOUT_S, BODY_STALL_S


def until_closed(sock: socket.socket, limit_s: float) -> tuple[bytes, float]:
    """What the server sent before it closed the connection, and after how long."""
    t0, got = time.monotonic(), b""
    sock.settimeout(limit_s)
    while True:
        try:
            part = sock.recv(65536)
        except ConnectionResetError:
            part = b""
        if not part:
            return got, time.monotonic() - t0
        got += part


def connect(server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def head(length: int) -> bytes:
    return (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def log_lines(server, words: str) -> list[str]:
    return [ln for ln in server.log.read_text().splitlines() if words in ln]


def test_garbage_and_half_open_connections_cost_one_line_each(server):
    header_s, body_s = deadlines()
    noise = bytes(b for b in os.urandom(256) if b not in b"\r\n")[:47]
    with connect(server) as s:  # random bytes, no line end, a plausible first byte: h11 waits
        s.sendall(b"X" + noise)
        _, took = until_closed(s, header_s + SLACK_S)
    assert header_s * 0.9 <= took < header_s + SLACK_S
    with connect(server) as s:  # a control byte first: h11 refuses it at once (a 400)
        s.sendall(b"\x00" + noise)
        got, took = until_closed(s, SLACK_S)
    assert got.startswith(b"HTTP/1.1 400") and took < SLACK_S
    with connect(server) as s:  # connects, says nothing
        _, took = until_closed(s, header_s + SLACK_S)
    assert took < header_s + SLACK_S
    with connect(server) as s:  # a head, 10 of 1000 body bytes, then gone
        s.sendall(head(1000) + b'{"model": ')
        time.sleep(0.5)
    with connect(server) as s:  # a head, 10 bytes, then nothing: 408
        s.sendall(head(1000) + b'{"model": ')
        got, took = until_closed(s, body_s + SLACK_S)
    assert got.startswith(b"HTTP/1.1 408") and b"stalled" in got and took < body_s + SLACK_S
    body = {"model": MODEL, "prompt": "left mid-way", "max_tokens": 200, "stream": True}
    with httpx.stream("POST", f"{server.base}/v1/completions", json=body, timeout=60) as r:
        assert next(r.iter_lines()).startswith("data: ")  # one chunk, then the client leaves
    deadline = time.monotonic() + 60
    while not log_lines(server, "closed the connection after 10 bytes") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(log_lines(server, "48 bytes of an incomplete request head")) == 1
    assert len(log_lines(server, "it sent nothing in")) == 1
    assert len(log_lines(server, "Invalid HTTP request received.")) == 1
    assert len(log_lines(server, "closed the connection after 10 bytes of its request body")) == 1
    assert len(log_lines(server, "request body stalled")) == 1
    assert httpx.get(f"{server.base}/health", timeout=10).status_code == 200
    text = server.log.read_text()
    assert "Traceback" not in text and "ClientDisconnect" not in text, text


def stream(server, prompt: str, max_tokens: int, first: threading.Event | None = None) -> str:
    """The response id of a streamed completion (read to its end, or to the kill)."""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": True}
    rid = ""
    try:
        with httpx.stream("POST", f"{server.base}/v1/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    rid = json.loads(line[6:])["id"]
                    if first is not None:
                        first.set()
    except httpx.HTTPError:
        pass  # killed mid-stream
    return rid


def test_a_sigkill_leaves_the_finished_rows_and_a_restart_is_refused(server):
    # Round one: 32 clients stream to the end. Round two: 32 more, killed once each has its
    # first token. The engine journals a step's finished rows before its next step, and
    # round two's first tokens come from later steps: round one's rows are all on disk.
    done: list[str] = []
    threads = [threading.Thread(target=lambda k=k: done.append(stream(server, f"round one {k}", 6)))
               for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(done) == CLIENTS and all(done)
    firsts = [threading.Event() for _ in range(CLIENTS)]
    threads = [threading.Thread(target=stream, args=(server, f"round two {k}", 400, firsts[k]), daemon=True)
               for k in range(CLIENTS)]
    for t in threads:
        t.start()
    assert all(e.wait(120) for e in firsts)
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(30)
    for t in threads:
        t.join(120)
    out = server.out
    assert not (out / "meta.json").exists()
    from batchlab.core.run_journal import read_journal
    journal = read_journal(out / "continuous" / "requests.journal.csv")
    assert not journal.torn
    finished = {f"cmpl-{r['request_id']}" for r in journal.rows if r["status"] == "finished"}
    assert set(done) <= finished
    rows = {r["request_id"]: r for r in journal.rows}
    assert len(rows) == len(journal.rows)  # a request ends once
    assert all(float(rows[d[5:]]["finish_s"]) >= float(rows[d[5:]]["first_token_s"]) for d in done)
    p = batchlab("serve", "--model", MODEL, "--port", "0", "--out", str(out), timeout=120)
    assert p.returncode == 2, p.stderr
    line = p.stderr.strip().splitlines()[-1]
    assert f"left {len(journal.rows)} request rows" in line and "new --out" in line, p.stderr
    assert "Traceback" not in p.stderr
