"""What serving a request leaves behind (issue 46, item 6): after each wave of requests
(greedy, seeded, with stop strings, aborted mid-way) the engine loop holds nothing of
them but their table rows, and the Python objects it keeps do not grow with the requests
served. (benchmarks/bench_serve_soak.py measures the process's memory over minutes.)"""
from __future__ import annotations

import gc
import threading

import pytest

from batchlab.core.config import SchedulerConfig

pytestmark = pytest.mark.backend
WAVE = 24


def test_requests_leave_nothing_but_their_rows(runtime):
    from batchlab.backend.sampling import SamplingParams
    from batchlab.backend.server.engine_loop import EngineLoop
    from batchlab.backend.server.stops import StopMatcher
    loop = EngineLoop(runtime, SchedulerConfig(policy="continuous", block_size=8, max_num_seqs=8),
                      warmup=False)
    journalled: list[int] = []
    loop.on_rows = lambda seqs: journalled.extend(s.id for s in seqs)
    loop.start()
    tracked = []
    try:
        for wave in range(6):
            ends = []
            for k in range(WAVE):
                done = threading.Event()
                ends.append(done)
                emit = (lambda ev, d=done: ev.finished and d.set())
                r = loop.new_request([1 + k % 7, 2, 3 + wave], 4 + k % 5, loop.clock())
                kind = k % 4
                params = SamplingParams(temperature=1.0, seed=k) if kind == 1 else None
                stop = StopMatcher([chr(33 + k % 90)], lambda t: chr(t % 128), 0) if kind == 2 else None
                loop.submit(r, emit, params, stop)
                if kind == 3:  # the client leaves
                    loop.abort(r.id)
                    done.set()
            assert all(d.wait(120) for d in ends), "a request never ended"
            deadline = threading.Event()
            for _ in range(200):  # the aborts are taken at the next step boundary
                if not loop._live:
                    break
                deadline.wait(0.05)
            assert not loop._live and not loop._params and not loop._stops
            assert not loop.engine.generators and not loop.engine.failed and not loop.engine._prompts
            gc.collect()
            tracked.append(len(gc.get_objects()))
    finally:
        loop.stop()
    assert len(journalled) == len(set(journalled)) == loop.rec.num_requests
    assert loop.rec.num_requests >= 6 * WAVE * 3 // 4  # all but aborts taken before admission
    # From the second wave on (the first warms lazily made objects), fewer than one tracked
    # object a request: nothing per request stays alive.
    assert tracked[-1] - tracked[1] < 4 * WAVE, tracked
