"""`batchlab serve` against a hostile client: every kind of bad or extreme request is
answered on its own (a 400 naming the field, or a correct reply), then a normal request
still gets the same answer as before and /health is 200. The server is started with
--port 0 and found at the port it prints. Also: stop strings, top_p and per-request seeds
do what they say, and the request table has no row left `running`."""
from __future__ import annotations

import csv
import json

import httpx
import pytest

from tests.serve_helpers import ServeProcess

pytestmark = [pytest.mark.slow, pytest.mark.backend]
MODEL = "batchlab-tiny"
URL = "/v1/completions"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ServeProcess("--model", MODEL, "--num-kv-blocks", "256", out=tmp_path_factory.mktemp("h") / "out",
                       port=0)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def post(server, body, path=URL) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{server.base}{path}", content=content, timeout=120,
                      headers={"content-type": "application/json"})


def text_of(server, **extra) -> tuple[str, dict]:
    r = post(server, {"model": MODEL, "prompt": "The answer is", "max_tokens": 12, **extra})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"], r.json()


def stream_text(server, **extra) -> tuple[str, str]:
    return _stream(server, [], **extra)


def token_texts(server) -> list[str]:
    """The text of each token of the greedy reply, a stream chunk each."""
    chunks: list[str] = []
    _stream(server, chunks)
    return chunks


def _stream(server, chunks: list[str], **extra) -> tuple[str, str]:
    body = {"model": MODEL, "prompt": "The answer is", "max_tokens": 12, "stream": True, **extra}
    text, reason = "", None
    with httpx.stream("POST", f"{server.base}{URL}", json=body, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                c = json.loads(line[6:])["choices"][0]
                text += c["text"]
                chunks.append(c["text"])
                reason = c["finish_reason"] or reason
    return text, reason


HOSTILE_400 = [  # (body, the words the error must hold)
    (b'{"model": "batchlab-tiny", "prompt": "hi", "temperature": NaN}', "NaN"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "temperature": Infinity}', "Infinity"),
    (b'{"model": "batchlab-tiny", "prompt": "\\ud800 lone"}', "prompt"),
    (b'{"model": "batchlab-tiny", "messages": [{"role": "user", "content": "\\udfff"}]}', "messages"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "max_tokens": true}', "max_tokens"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "max_tokens": 1e100}', "max_tokens"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "max_tokens": 100000000000000000000000}', "max_tokens"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "logit_bias": {"7": 100}}', "logit_bias"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "frequency_penalty": 2}', "frequency_penalty"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "made_up": 1}', "made_up"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "top_p": 0}', "top_p"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "temperature": -1e-310}', "temperature"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "seed": 18446744073709551616}', "seed"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "stop": ""}', "stop"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "stop": "\\ud83d"}', "stop"),
    (b'{"model": "batchlab-tiny", "prompt": [1.5, 2]}', "prompt"),
    (b'{"model": "batchlab-tiny", "prompt": [true]}', "prompt"),
    (b'{"model": "batchlab-tiny", "prompt": "\xff\xfe"}', "malformed JSON"),
    (b'{"model": "batchlab-tiny", "prompt": ' + b"[" * 100000 + b"]" * 100000 + b"}", "JSON"),
    (b'{"model": "batchlab-tiny", "prompt": ' + b"[" * 900 + b"]" * 900 + b"}", "prompt"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "user": {"a": ' + b"[" * 900 + b'"\\ud800"'
     + b"]" * 900 + b"}}", "user.a"),
]


def test_hostile_requests_take_nobody_down(server):
    before, _ = text_of(server)
    for body, words in HOSTILE_400:
        path = "/v1/chat/completions" if b"messages" in body else URL
        r = post(server, body, path)
        assert r.status_code == 400, (body[:80], r.text)
        err = r.json()["error"]
        assert words in f"{err['param']}: {err['message']}", (body[:80], r.text)
    # extreme but valid: each gets a full reply
    for extra in ({"temperature": 1e-310}, {"temperature": 5e-324}, {"temperature": 100, "top_p": 1e-300},
                  {"temperature": 1.0, "top_k": 10 ** 9}, {"temperature": 2.0, "seed": 2 ** 64 - 1},
                  {"temperature": 2.0, "seed": -(2 ** 63)}, {"stop": ["\ud7ff"] * 16}):
        text, body = text_of(server, **extra)
        assert body["usage"]["completion_tokens"] == 12, extra
        assert stream_text(server, **extra)[0] == text or "seed" not in extra and "top_p" not in extra
    assert text_of(server, temperature=1e-310)[0] == before  # below 1e-5: greedy
    assert text_of(server)[0] == before
    assert httpx.get(f"{server.base}/health", timeout=10).status_code == 200


def test_stop_strings_top_p_and_seeds_are_honoured(server):
    full, _ = text_of(server)
    tokens = token_texts(server)
    assert "".join(tokens) == full and len(tokens) == 12
    stop = full[len(tokens[0]) + 1:len(tokens[0]) + 4]  # across the 2nd token's end, maybe
    cut = full[:full.find(stop)]
    made = next(i + 1 for i in range(12) if stop in "".join(tokens[:i + 1]))
    text, body = text_of(server, stop=[stop, "never-there"])
    assert text == cut and body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == made < 12
    assert stream_text(server, stop=stop) == (cut, "stop")
    a = [text_of(server, temperature=1.5, seed=7)[0] for _ in range(2)]
    assert a[0] == a[1] == stream_text(server, temperature=1.5, seed=7)[0]
    draws = {text_of(server, temperature=1.5, seed=s)[0] for s in range(4)}
    assert len(draws) > 1  # the seed matters
    assert text_of(server, temperature=50.0, top_p=1e-9)[0] == full  # only the best token is left


def test_no_row_is_left_running(server):
    assert server.stop() == 0
    with open(next(server.out.rglob("requests.csv"))) as f:
        rows = list(csv.DictReader(f))
    assert rows and {r["status"] for r in rows} == {"finished"}
    assert any(0 < int(r["output_len"]) < 12 for r in rows)  # stopped: the tokens they made
    assert not list(server.out.rglob("requests.journal.csv"))  # a clean stop removes the journal
