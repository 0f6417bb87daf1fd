"""One request cannot take the engine loop down: a request whose sampling fails, and a
step that fails, end the requests concerned (rows `failed` with the reason, their clients
an error) while the loop goes on serving the others with the same answers as before."""
from __future__ import annotations

import threading

import pytest

from batchlab.core.config import SchedulerConfig

pytestmark = pytest.mark.backend

PROMPTS = [[5, 6, 7], [9, 1], [3, 3, 3, 3]]


class Client:
    def __init__(self) -> None:
        self.events, self.done = [], threading.Event()

    def __call__(self, ev) -> None:
        self.events.append(ev)
        if ev.finished:
            self.done.set()

    @property
    def tokens(self) -> list[int]:
        return [e.token for e in self.events if not e.error]


def serve(runtime, jobs, waves: int = 1):
    """Run (prompt, max_tokens, params) jobs through one EngineLoop, all at once, `waves`
    times in turn (each after the last has ended): the clients, the loop."""
    from batchlab.backend.server.engine_loop import EngineLoop
    loop = EngineLoop(runtime, SchedulerConfig(policy="continuous", block_size=8), warmup=False)
    loop.start()
    clients = []
    try:
        for _ in range(waves):
            wave = []
            for ids, n, params in jobs:
                c = Client()
                loop.submit(loop.new_request(ids, n, loop.clock()), c, params)
                wave.append(c)
            for c in wave:
                assert c.done.wait(120), "a request never ended"
            clients += wave
    finally:
        loop.stop()
    return clients, loop


def test_a_failing_request_fails_alone(runtime, monkeypatch):
    from batchlab.backend.server import engine_loop
    from batchlab.backend.sampling import SamplingParams
    clean, _ = serve(runtime, [(p, 6, None) for p in PROMPTS])
    real = engine_loop.sample_row

    def fragile(logits, p, gen):
        if p.top_p == 0.5:
            raise FloatingPointError("poisoned")
        return real(logits, p, gen)

    monkeypatch.setattr(engine_loop, "sample_row", fragile)
    bad = SamplingParams(temperature=1.0, top_p=0.5)
    clients, loop = serve(runtime, [(PROMPTS[0], 6, None), (PROMPTS[1], 6, bad), (PROMPTS[2], 6, None)])
    assert not loop.error
    assert clients[1].events[-1].error.endswith("FloatingPointError: poisoned")
    assert [c.tokens for c in (clients[0], clients[2])] == [clean[0].tokens, clean[2].tokens]
    rows = loop.result().requests
    status = dict(zip(rows["request_id"], rows["status"]))
    reason = dict(zip(rows["request_id"], rows["reject_reason"]))
    assert status == {0: "finished", 1: "failed", 2: "finished"}
    assert "poisoned" in reason[1]


def test_a_failing_step_fails_its_requests_and_the_loop_goes_on(runtime, monkeypatch):
    from batchlab.backend.server import engine_loop
    clean, _ = serve(runtime, [(PROMPTS[0], 4, None)])
    real = engine_loop.run_step
    calls = {"n": 0}

    def once(sched, engine, batch, *a):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("step exploded")
        return real(sched, engine, batch, *a)

    monkeypatch.setattr(engine_loop, "run_step", once)
    (first, after), loop = serve(runtime, [(PROMPTS[0], 4, None)], waves=2)
    assert "step exploded" in first.events[-1].error and first.events[-1].status == 500
    assert after.tokens == clean[0].tokens and not loop.error and calls["n"] > 2
    assert loop.result().requests["status"].tolist() == ["failed", "finished"]


def test_a_broken_engine_stops_after_a_few_steps_and_says_so(runtime, monkeypatch):
    from batchlab.backend.server import engine_loop

    def broken(*a):
        raise RuntimeError("no device")

    monkeypatch.setattr(engine_loop, "run_step", broken)
    clients, loop = serve(runtime, [(PROMPTS[0], 3, None)], waves=engine_loop.MAX_FAILED_STEPS)
    assert all(c.events[-1].error for c in clients)
    assert loop._thread.join(10) is None and not loop.running
    assert "no device" in loop.error
