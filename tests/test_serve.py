"""`batchlab serve` end to end: a real server subprocess on 127.0.0.1 (batchlab-tiny),
called with the official openai client and with `batchlab replay`; replayed latencies
checked against the server's own request records; /metrics scraped; bad input refused
with OpenAI-style errors while the server keeps serving; a client that leaves frees its
KV blocks. The tests run in file order on one server; the last one stops it."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest

from batchlab.core.features import IDLE_GAP_S
from batchlab.experiments.validation.probe_speed import PROBE_OUTPUT, PROBE_REQUESTS
from tests.serve_helpers import ROOT, ServeProcess, batchlab

openai = pytest.importorskip("openai")
pytestmark = [pytest.mark.slow, pytest.mark.backend]

KEY = "test-key-17"
MODEL = "batchlab-tiny"
BLOCKS = 512  # KV blocks of 16 tokens: small enough that a long request shows in the gauge
# How much later the client may see a first token or the end of a stream than the server
# stamped it: HTTP framing and parsing (a few ms at most) plus the time the server's HTTP
# thread and the client process wait for a CPU. On a quiet machine that wait is well under
# a millisecond; on the project's shared 2-vCPU machines (load average 5-10 from other
# jobs) it was 15-30 ms at the median, which no bound of "a few ms" can hold. So: the
# order of the two clocks is exact; the decode span (first token to end), where the two
# hand-overs cancel, must agree within framing plus a loopback round trip measured at the
# same moment (its p90); TTFT and E2E themselves within CONTENDED_MS plus that p90 (a guard
# against a wrong measurement: a missed or extra step, the wrong start, costs one to several
# steps; the round trip grows with the machine's load, as the client's wait does).
FRAMING_MS, CONTENDED_MS = 5.0, 50.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ServeProcess("--model", MODEL, "--num-kv-blocks", str(BLOCKS), "--max-num-seqs", "64",
                       out=tmp_path_factory.mktemp("serve") / "out", env={"BATCHLAB_API_KEY": KEY})
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.base}/v1", api_key=KEY, max_retries=0, timeout=120)


def auth() -> dict:
    return {"Authorization": f"Bearer {KEY}"}


def metrics(server) -> dict[str, float]:
    text = httpx.get(f"{server.base}/metrics", timeout=10).text
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            name = series.split("{")[0]
            if not name.endswith(("_bucket", "_created")):
                out[name] = float(value)  # one label set: model_name
    return out


def test_completions_text_and_token_ids(client):
    r = client.completions.create(model=MODEL, prompt="Hello, batchlab", max_tokens=7,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len("Hello, batchlab".encode())  # the byte codec
    assert r.usage.completion_tokens == 7 and r.choices[0].text
    ids = [5, 17, 31999, 0, 42]
    chunks = list(client.completions.create(model=MODEL, prompt=ids, max_tokens=9, stream=True,
                                            stream_options={"include_usage": True}))
    tokens = [c for c in chunks if c.choices]
    assert len(tokens) == 9 and all(c.choices[0].text for c in tokens)  # one chunk per token
    assert [c.choices[0].finish_reason for c in tokens] == [None] * 8 + ["length"]
    assert chunks[-1].usage.prompt_tokens == 5 and chunks[-1].usage.completion_tokens == 9
    # Greedy and seeded: the same prompt gives the same text, streamed or not.
    again = client.completions.create(model=MODEL, prompt=ids, max_tokens=9, temperature=0)
    assert again.choices[0].text == "".join(c.choices[0].text for c in tokens)


def test_chat_streaming_and_not(client):
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, max_completion_tokens=5)
    assert r.choices[0].message.role == "assistant" and r.usage.completion_tokens == 5
    stream = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=6, stream=True,
                                            stream_options={"include_usage": True}, temperature=0.8)
    chunks = list(stream)
    tokens = [c for c in chunks if c.choices]
    assert len(tokens) == 6 and tokens[0].choices[0].delta.role == "assistant"
    assert chunks[-1].usage.completion_tokens == 6


def test_models_health_and_api_key(server, client):
    assert [m.id for m in client.models.list()] == [MODEL]
    for path in ("/v1/models", "/v1/completions"):
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            r = httpx.post(f"{server.base}{path}", json={"model": MODEL, "prompt": "x"}, headers=headers) \
                if path.endswith("completions") else httpx.get(f"{server.base}{path}", headers=headers)
            assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert httpx.get(f"{server.base}/health").status_code == 200  # open, as vLLM's
    assert httpx.get(f"{server.base}/metrics").status_code == 200


def test_metrics_state_the_engine_settings(server):
    """The settings a client calibrating from request timings reads (vLLM's cache config
    gauge, batchlab's scheduler one) are the ones this server runs with."""
    from batchlab.calibration.from_replay.settings import parse_metrics
    found = parse_metrics(httpx.get(f"{server.base}/metrics", timeout=10).text)
    assert found["num_kv_blocks"] == BLOCKS and found["max_num_seqs"] == 64
    assert found["block_size"] == 16
    assert found["prefix_caching"] is True  # the continuous policy's default, as vLLM's V1
    assert found["max_num_batched_tokens"] > 0 and found["policy"] == "continuous"


@pytest.mark.parametrize("body, status, words", [
    (b'{"model": "batchlab-tiny", "prompt": ', 400, "malformed JSON"),
    (b'[1, 2]', 400, "JSON object"),
    (b'{"model": "gpt-5", "prompt": "hi"}', 404, "does not exist"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "max_tokens": 9000}', 400, "maximum context length"),
    (b'{"model": "batchlab-tiny", "prompt": [1, 2, 32000]}', 400, "out of vocabulary"),
    (b'{"model": "batchlab-tiny", "prompt": [-1]}', 400, "out of vocabulary"),
    (b'{"model": "batchlab-tiny", "prompt": [], "max_tokens": 3}', 400, "empty"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "max_tokens": 0}', 400, "max_tokens"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "n": 2}', 400, "n=2"),
    (b'{"model": "batchlab-tiny", "prompt": ["a", "b"]}', 400, "one per request"),
    (b'{"model": "batchlab-tiny", "prompt": "hi", "max_tokens": 4, "min_tokens": 5}', 400, "min_tokens"),
    (b'{"model": "batchlab-tiny", "messages": []}', 400, "messages"),
])
def test_bad_input_is_a_4xx_with_an_openai_error(server, body, status, words):
    path = "/v1/chat/completions" if b"messages" in body else "/v1/completions"
    r = httpx.post(f"{server.base}{path}", content=body, headers={**auth(), "content-type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert words in err["message"] and {"message", "type", "param", "code"} <= set(err)
    ok = httpx.post(f"{server.base}/v1/completions", json={"model": MODEL, "prompt": [1], "max_tokens": 2},
                    headers=auth(), timeout=60)
    assert ok.status_code == 200  # still serving


def test_prompt_longer_than_the_context_and_huge_bodies(server):
    long = {"model": MODEL, "prompt": [1] * 8192, "max_tokens": 1}
    r = httpx.post(f"{server.base}/v1/completions", json=long, headers=auth())
    assert r.status_code == 400 and "the prompt has 8192 tokens" in r.json()["error"]["message"]
    r = httpx.post(f"{server.base}/v1/completions", headers=auth(),
                   content=b'{"model": "batchlab-tiny", "prompt": "' + b"a" * (5 << 20) + b'"}')
    assert r.status_code == 413 and "exceeds the limit" in r.json()["error"]["message"]


def test_a_client_that_leaves_frees_its_kv_blocks(server):
    body = {"model": MODEL, "prompt": [3] * 100, "max_tokens": 4000, "stream": True}
    with httpx.stream("POST", f"{server.base}/v1/completions", json=body, headers=auth(), timeout=60) as r:
        lines = r.iter_lines()  # kept open: leaving a for loop early would close the stream
        assert sum(next(lines).startswith("data:") for _ in range(6)) == 3  # 3 chunks, blank lines
        m = metrics(server)
        assert m["vllm:num_requests_running"] == 1 and m["vllm:kv_cache_usage_perc"] > 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = metrics(server)
        if m["vllm:num_requests_running"] == 0 and m["vllm:kv_cache_usage_perc"] == 0:
            break
        time.sleep(0.1)
    assert m["vllm:num_requests_running"] == 0 and m["vllm:kv_cache_usage_perc"] == 0


def test_validate_against_the_endpoint(server, tmp_path):
    p = batchlab("validate", "--endpoint", server.base, "--api-key", KEY, "--profile", "default",
                 "--workload", "chat", "--num-requests", "6", "--rate", "4", "--max-prompt-len", "128",
                 "--max-output-len", "12", "--num-kv-blocks", str(BLOCKS), "--out", str(tmp_path / "v"),
                 "--no-progress")
    assert p.returncode == 0, p.stderr
    assert f"[continuous] {server.base}/v1/completions: 1 real run(s) (-; sim " in p.stdout
    for label in ("TTFT p50", "TPOT mean", "E2E latency p99", "output tokens/s"):
        assert label in p.stdout
    assert "machine speed per replay (" in p.stdout and "from an idle probe" in p.stdout  # probe_speed.py
    assert max(len(line) for line in p.stdout.splitlines()) <= 120
    comp = json.loads((tmp_path / "v" / "comparison.json").read_text())["cells"][0]
    assert comp["policy"] == "continuous" and comp["where"] == f"{server.base}/v1/completions"
    ttft = next(c for c in comp["metrics"] if c["key"] == "median_ttft_ms")
    assert ttft["real"][0] > 0 and ttft["sim"] > 0 and comp["diagnostics"]["runs"][0]["failed"] == 0
    assert ttft["verdict_normalised"] is not None  # levelled by the speed probes around the replay
    assert comp["machine_speed"][0]["factor"] > 0
    assert len(list(csv.DictReader(open(tmp_path / "v" / "real" / "requests.csv")))) == 6


def test_validate_against_the_endpoint_repeated(server, tmp_path):
    """--repeats 2 replays twice, the prompts' tokens seeded apart: the second replay finds
    nothing of the first in the prefix cache, and the error is judged beside the spread."""
    journal = server.out / "continuous" / "requests.journal.csv"
    before = len(list(csv.DictReader(open(journal)))) if journal.exists() else 0
    p = batchlab("validate", "--endpoint", server.base, "--api-key", KEY, "--profile", "default",
                 "--workload", "uniform", "--num-requests", "4", "--rate", "4", "--max-prompt-len", "64",
                 "--max-output-len", "6", "--num-kv-blocks", str(BLOCKS), "--repeats", "2", "--seed", "71",
                 "--out", str(tmp_path / "v"), "--no-progress")
    assert p.returncode == 0, p.stderr
    assert f"[continuous] {server.base}/v1/completions: 2 real run(s)" in p.stdout
    comp = json.loads((tmp_path / "v" / "comparison.json").read_text())["cells"][0]
    ttft = next(c for c in comp["metrics"] if c["key"] == "median_ttft_ms")
    assert len(ttft["real"]) == 2 and all(v > 0 for v in ttft["real"])
    assert [r["failed"] for r in comp["diagnostics"]["runs"]] == [0, 0]
    for name in ("real", "real_2"):
        assert len(list(csv.DictReader(open(tmp_path / "v" / name / "requests.csv")))) == 4
    rows = list(csv.DictReader(open(journal)))[before:]
    probes = [r for r in rows if int(r["output_len"]) == PROBE_OUTPUT]  # before, between, after
    served = [r for r in rows if int(r["output_len"]) != PROBE_OUTPUT]  # the replays: seeds 71, 72
    assert len(probes) == 3 * PROBE_REQUESTS
    assert len(served) == 8 and all(int(r["cached_tokens"]) == 0 for r in served), [(r["request_id"], r["prompt_len"], r["cached_tokens"]) for r in served]


def test_replay_agrees_with_the_server_records(server, tmp_path):
    before = metrics(server)
    out = tmp_path / "replay"
    p = subprocess.Popen(
        [sys.executable, "-m", "batchlab", "replay", "--endpoint", server.base, "--api-key", KEY,
         "--workload", "chat", "--num-requests", "16", "--rate", "4", "--max-prompt-len", "256",
         "--max-output-len", "24", "--seed", "3", "--out", str(out), "--no-progress"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True)
    rtt = []
    try:
        with httpx.Client(timeout=10) as c:  # one connection: the round trip, not its set-up
            c.get(f"{server.base}/health")
            while p.poll() is None:  # loopback round trips to the server meanwhile
                t = time.perf_counter()
                c.get(f"{server.base}/health")
                rtt.append(time.perf_counter() - t)
                time.sleep(0.05)
        err = p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
    assert p.returncode == 0, err
    assert "all 16 requests finished" in err
    bench = json.loads((out / "result.json").read_text())
    assert bench["completed"] == 16 and bench["failed"] == 0 and len(bench["ttfts"]) == 16
    rows = list(csv.DictReader(open(out / "replay" / "requests.csv")))
    after = metrics(server)
    produced = sum(int(r["output_len"]) for r in rows)
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == produced
    assert after["vllm:e2e_request_latency_seconds_count"] - before["vllm:e2e_request_latency_seconds_count"] == 16
    assert server.stop() == 0  # Ctrl-C: a clean stop that writes --out
    served = {int(r["request_id"]): r for r in csv.DictReader(open(server.out / "continuous" / "requests.csv"))}
    assert any(r["status"] == "aborted" for r in served.values())  # the client that left
    # The server's step table carries the same step context as batchlab run's and the sim's
    # (core/features.py StepHistory): a step follows a prefill iff the previous one had one;
    # it follows idleness only after a gap of at least IDLE_GAP_S; the first one does.
    steps = list(csv.DictReader(open(server.out / "continuous" / "steps.csv")))
    # Its meta.json says how fast the machine ran (priced by the shipped profile of this
    # setup, or a reference probe around the session) and whether its queue settled.
    meta = json.loads((server.out / "meta.json").read_text())["continuous"]
    speed = meta["machine_speed"]
    assert (speed["factor"] or 0) > 0 or speed["probe"]["after"]["read_bandwidth"] > 0
    assert meta["stability"]["verdict"] in ("stable", "overloaded")
    # It gave freed heap back between the replay's bursts (backend/server/memory.py).
    from batchlab.backend.server.memory import HeapTrim
    assert meta["heap_trims"] >= (1 if HeapTrim().available else 0) and meta["heap_trim_s"] >= 0
    assert int(steps[0]["after_idle"]) == 1 and int(steps[0]["after_prefill"]) == 0
    for prev, cur in zip(steps, steps[1:]):
        assert int(cur["after_prefill"]) == (int(prev["num_prefill_seqs"]) > 0)
        gap = float(cur["start_s"]) - float(prev["start_s"]) - float(prev["duration_s"])
        assert not int(cur["after_idle"]) or gap >= IDLE_GAP_S - 1e-3, (prev, cur)
    assert any(int(s["after_idle"]) for s in steps[1:])  # the replay's gaps between arrivals
    assert any(int(s["cached_blocks"]) for s in steps) == any(int(r["cached_tokens"]) for r in served.values())
    ttft, e2e = [], []
    for row, rid in zip(rows, bench["response_ids"]):
        s = served[int(rid.split("-")[1])]
        assert int(s["prompt_len"]) == int(row["prompt_len"]) and s["output_len"] == row["output_len"]
        assert s["status"] == "finished"
        a, sa = float(row["arrival_s"]), float(s["arrival_s"])
        ttft.append((float(row["first_token_s"]) - a) - (float(s["first_token_s"]) - sa))
        e2e.append((float(row["finish_s"]) - a) - (float(s["finish_s"]) - sa))
    ttft_ms, e2e_ms, rtt_ms = np.array(ttft) * 1000, np.array(e2e) * 1000, np.array(rtt) * 1000
    span_ms = np.abs(e2e_ms - ttft_ms)
    print(f"replay - server, median / p90 ms: TTFT {np.median(ttft_ms):.1f} / {np.percentile(ttft_ms, 90):.1f}, "
          f"E2E {np.median(e2e_ms):.1f} / {np.percentile(e2e_ms, 90):.1f}, |decode span| "
          f"{np.median(span_ms):.1f} / {np.percentile(span_ms, 90):.1f}; loopback round trip "
          f"{np.median(rtt_ms):.1f} / {np.percentile(rtt_ms, 90):.1f}")
    # The client sends before the server stamps arrival and reads after it stamps tokens.
    assert ttft_ms.min() >= 0 and e2e_ms.min() >= 0
    # The prober idles between round trips, so a busy machine schedules it sooner than the
    # busy client: its p90 stands for the client's typical wait.
    assert np.median(span_ms) <= FRAMING_MS + np.percentile(rtt_ms, 90), (span_ms, rtt_ms)
    bound = CONTENDED_MS + np.percentile(rtt_ms, 90)
    assert np.median(ttft_ms) <= bound and np.median(e2e_ms) <= bound, (ttft_ms, e2e_ms, rtt_ms)
