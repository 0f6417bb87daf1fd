"""Requests sent straight to a `batchlab serve` engine loop (no HTTP), for tests of what it
streams: each prompt submitted at once, a bounded wait for every reply to end."""
from __future__ import annotations

import threading

from batchlab.core.config import SchedulerConfig


def stream_through_loop(runtime, prompts: list[list[int]], max_tokens: int, speculative=None, params=None):
    """(each request's TokenEvents in order, the stopped loop) of a chunked loop."""
    from batchlab.backend.server.engine_loop import EngineLoop  # lazy: torch
    loop = EngineLoop(runtime, SchedulerConfig(policy="chunked", block_size=8), warmup=False,
                      speculative=speculative)
    loop.start()
    got = []
    try:
        for ids in prompts:
            events, done = [], threading.Event()

            def emit(e, events=events, done=done):
                events.append(e)
                if e.finished:
                    done.set()
            loop.submit(loop.new_request(ids, max_tokens, loop.clock()), emit, params)
            got.append((events, done))
        for _, done in got:
            assert done.wait(120), "a request never ended"
    finally:
        loop.stop()
    return [events for events, _ in got], loop
