"""Where serve's memory goes, without HTTP: waves of requests (all sent at once, each wave
after the last has ended) through one EngineLoop of batchlab-tiny in this process, its
VmRSS printed every 5 waves, then glibc's malloc_trim(0) and the VmRSS after it (what
the allocator kept but no longer used). The loop trims the heap itself when it goes idle
(backend/server/memory.py); --no-trim turns that off, to see what it saves. Run it under allocator settings to compare
(MALLOC_ARENA_MAX=1, ONEDNN_PRIMITIVE_CACHE_CAPACITY=0, MKL_DISABLE_FAST_MM=1).

    python benchmarks/serve_memory_probe.py                  # 30 waves of 64, mixed lengths
    python benchmarks/serve_memory_probe.py --lengths fixed --kv-memory 64MiB
    python benchmarks/serve_memory_probe.py --waves 100 --kernel-caches 256"""
from __future__ import annotations

import argparse
import ctypes
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from batchlab.backend.runtime import Runtime  # noqa: E402
from batchlab.backend.server.engine_loop import EngineLoop  # noqa: E402
from batchlab.core.config import SchedulerConfig  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")) / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--waves", type=int, default=30)
    ap.add_argument("--seats", type=int, default=64)
    ap.add_argument("--lengths", choices=("mixed", "fixed"), default="mixed")
    ap.add_argument("--kv-memory", default="64MiB")
    ap.add_argument("--no-trim", action="store_true", help="the loop does not trim the heap")
    ap.add_argument("--kernel-caches", type=int, default=None, metavar="N",
                    help="bound torch's oneDNN kernel caches (oneDNN's and ideep's) to N entries "
                    "(default: as the environment says, else 1024 each)")
    a = ap.parse_args()
    if not 1 <= a.waves <= 200 or not 1 <= a.seats <= 256:
        raise SystemExit("--waves must be 1-200, --seats 1-256")
    if a.kernel_caches is not None:  # read once, at the first kernel
        for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
            os.environ[name] = str(a.kernel_caches)
    t0 = time.perf_counter()
    rt = Runtime("batchlab-tiny", kv_memory=a.kv_memory, threads=1)
    loop = EngineLoop(rt, SchedulerConfig(policy="continuous", max_num_seqs=a.seats))
    if a.no_trim:
        loop.heap.every_s, loop.heap._trim = float("inf"), None
    loop.start()
    rng = random.Random(0)
    print(f"{'requests':>8} {'RSS (MiB)':>10}\n{0:8d} {rss_mib():10.1f}", flush=True)
    try:
        for wave in range(a.waves):
            ends = []
            for _ in range(a.seats):
                done = threading.Event()
                ends.append(done)
                prompt, out = (32, 16) if a.lengths == "fixed" else (rng.randint(8, 64), rng.randint(4, 24))
                r = loop.new_request([rng.randrange(256) for _ in range(prompt)], out, loop.clock())
                loop.submit(r, lambda ev, d=done: ev.finished and d.set())
            if not all(d.wait(120) for d in ends):
                raise SystemExit("a request never ended")
            if wave % 5 == 4:
                time.sleep(0.3)  # the loop, now idle, trims first: RSS as an idle server holds it
                print(f"{(wave + 1) * a.seats:8d} {rss_mib():10.1f}", flush=True)
        before = rss_mib()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        print(f"malloc_trim(0): {before:.1f} -> {rss_mib():.1f} MiB; the loop's own trims: "
              f"{loop.heap.count} taking {loop.heap.seconds * 1e3:.1f} ms in all; "
              f"{time.perf_counter() - t0:.1f} s wall, {os.times().user:.1f} CPU-s user")
    finally:
        loop.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
