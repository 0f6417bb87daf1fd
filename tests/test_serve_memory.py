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


def test_heap_trim_when_idle_after_work_and_on_a_clock_under_load():
    from batchlab.backend.server.memory import HeapTrim
    now = [0.0]
    trims: list[int] = []
    heap = HeapTrim(every_s=30.0, idle_s=0.5, clock=lambda: now[0])
    heap._trim = lambda pad: trims.append(pad) or 1
    heap.on_idle()
    assert trims == []  # nothing ran since it started: nothing to give back
    for _ in range(10):  # ten steps of 2 s: under load, no trim before 30 s
        now[0] += 2.0
        heap.after_step()
    assert trims == []
    for _ in range(10):
        now[0] += 2.0
        heap.after_step()
    assert trims == [0] and heap.count == 1  # at 30 s, once
    now[0] += 1.0
    heap.after_step()
    heap.on_idle()
    now[0] += 0.4
    heap.on_idle()
    assert heap.count == 1  # a short gap between requests: no pause for a trim
    heap.after_step()  # work again: the gap starts over
    heap.on_idle()
    now[0] += 0.3
    heap.on_idle()
    assert heap.count == 1
    now[0] += 0.3
    heap.on_idle()
    assert heap.count == 2  # idle 0.6 s after work: trims
    now[0] += 5.0
    heap.on_idle()
    assert heap.count == 2  # still idle, nothing ran: not again


def test_heap_trim_is_glibc_malloc_trim_where_glibc_is():
    import platform
    from batchlab.backend.server.memory import HeapTrim
    heap = HeapTrim(idle_s=0.0)
    assert heap.available == (platform.libc_ver()[0] == "glibc")
    heap.after_step()
    heap.on_idle()
    assert heap.count == (1 if heap.available else 0) and heap.seconds >= 0


def test_serve_loop_trims_its_heap_between_waves(runtime):
    from batchlab.backend.server.engine_loop import EngineLoop
    loop = EngineLoop(runtime, SchedulerConfig(policy="continuous", block_size=8, max_num_seqs=8),
                      warmup=False)
    if not loop.heap.available:
        pytest.skip("no glibc malloc_trim here")
    loop.start()
    try:
        for wave in range(2):
            done = threading.Event()
            loop.submit(loop.new_request([1, 2, 3 + wave], 3, loop.clock()),
                        lambda ev, d=done: ev.finished and d.set())
            assert done.wait(120), "a request never ended"
            for _ in range(200):  # the loop finds itself idle within a wait or two
                if loop.heap.count > wave:
                    break
                threading.Event().wait(0.05)
    finally:
        loop.stop()
    meta = loop.result().meta
    assert meta.heap_trims == loop.heap.count >= 2
    assert meta.heap_trim_s >= 0
