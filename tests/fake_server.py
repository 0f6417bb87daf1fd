"""A small OpenAI-shaped streaming server that lies, for replay's tests: run as
`python -m tests.fake_server`, it binds 127.0.0.1 on a free port, prints the port, and
answers POST /v1/completions by request number (n % len(LIES)): honest, or with one false
claim in its usage. It stops after MAX_LIFE_S, or when killed by its process id."""
from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_LIFE_S = 120


def honest(body: dict) -> tuple[int, dict]:
    """(chunks to stream, usage to report) for a request."""
    n = body["max_tokens"]
    return n, {"prompt_tokens": len(body["prompt"]), "completion_tokens": n, "total_tokens": 0}


LIES = [
    lambda n, u: (n, u),
    lambda n, u: (n, {**u, "completion_tokens": -5}),
    lambda n, u: (n, {**u, "completion_tokens": 60 + n}),
    lambda n, u: (n, {**u, "prompt_tokens": u["prompt_tokens"] + 1}),
    lambda n, u: (n, {**u, "completion_tokens": str(n)}),
    lambda n, u: (n, {**u, "prompt_tokens_details": {"cached_tokens": u["prompt_tokens"] + 9}}),
    lambda n, u: (n + 1, {**u, "completion_tokens": n + 1}),  # more than max_tokens
]


class Handler(BaseHTTPRequestHandler):
    count = 0
    lock = threading.Lock()

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with Handler.lock:
            n, Handler.count = Handler.count, Handler.count + 1
        chunks, usage = LIES[n % len(LIES)](*honest(body))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(chunks):
            choice = {"index": 0, "text": "x", "finish_reason": "length" if i == chunks - 1 else None}
            self.wfile.write(f"data: {json.dumps({'id': f'cmpl-{n}', 'choices': [choice]})}\n\n".encode())
        self.wfile.write(f"data: {json.dumps({'id': f'cmpl-{n}', 'choices': [], 'usage': usage})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def main() -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Timer(MAX_LIFE_S, srv.shutdown).start()
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
