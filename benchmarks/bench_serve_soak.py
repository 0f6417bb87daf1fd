"""Memory of `batchlab serve` under a soak: N streaming clients (a closed loop, default
64) send short completions for a bounded time, and the server's resident memory (VmRSS
of its process) is printed as it goes. A leak shows as RSS growing with the requests
served; what the run is meant to keep (its request and step tables, a row a request and
a step) grows too, and is printed beside it for comparison.

    python benchmarks/bench_serve_soak.py                      # 64 clients, 3 minutes
    python benchmarks/bench_serve_soak.py --minutes 1 --clients 16 --lengths fixed

CPU only, the embedded batchlab-tiny model; the clients run in this process (asyncio +
httpx), the server in its own. Bounded: --minutes of load, plus start and stop."""
from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.serve_helpers import ServeProcess  # noqa: E402

ROW_BYTES = {"requests": 13 * 8, "steps": 21 * 8}  # a row in the recorder's typed columns


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


async def client(base: str, stop_at: float, seed: int, counts: dict[str, int], fixed: bool) -> None:
    rng = random.Random(seed)
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        while time.monotonic() < stop_at:
            prompt, out = (32, 16) if fixed else (rng.randint(8, 64), rng.randint(4, 24))
            body = {"model": "batchlab-tiny", "prompt": [rng.randrange(256) for _ in range(prompt)],
                    "max_tokens": out, "stream": True}
            try:
                async with http.stream("POST", "/v1/completions", json=body) as r:
                    async for _ in r.aiter_lines():
                        pass
                counts["done" if r.status_code == 200 else "failed"] += 1
            except httpx.HTTPError:
                counts["failed"] += 1


async def soak(srv: ServeProcess, clients: int, seconds: float, every_s: float, fixed: bool) -> list[tuple]:
    counts = {"done": 0, "failed": 0}
    t0 = time.monotonic()
    tasks = [asyncio.create_task(client(srv.base, t0 + seconds, k, counts, fixed)) for k in range(clients)]
    samples = [(0.0, rss_mib(srv.proc.pid), 0, 0)]
    print(f"{'t (s)':>7} {'RSS (MiB)':>10} {'requests':>9} {'failed':>7}", flush=True)
    print(f"{0:7.0f} {samples[0][1]:10.1f} {0:9d} {0:7d}", flush=True)
    while not all(t.done() for t in tasks):
        await asyncio.wait(tasks, timeout=every_s)
        s = (time.monotonic() - t0, rss_mib(srv.proc.pid), counts["done"], counts["failed"])
        samples.append(s)
        print(f"{s[0]:7.0f} {s[1]:10.1f} {s[2]:9d} {s[3]:7d}", flush=True)
    for t in tasks:
        t.result()
    return samples


def rows(path: Path) -> int:
    with open(path, newline="") as f:
        return sum(1 for _ in csv.reader(f)) - 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples (default 10)")
    ap.add_argument("--lengths", choices=("mixed", "fixed"), default="mixed",
                    help="prompts of 8-64 tokens and replies of 4-24 (default), or all 32 and 16: "
                    "the same shapes over and over, so what grows is per request, not per new shape")
    a = ap.parse_args()
    if not 0 < a.minutes <= 30 or not 1 <= a.clients <= 256:
        raise SystemExit("--minutes must be in (0, 30], --clients in [1, 256]")
    with tempfile.TemporaryDirectory() as tmp:
        srv = ServeProcess("--model", "batchlab-tiny", "--max-num-seqs", str(a.clients),
                           out=Path(tmp) / "serve", port=0)
        try:
            srv.wait_ready()
            print(f"batchlab serve pid {srv.proc.pid}, {a.clients} clients for {a.minutes:g} min, "
                  f"{a.lengths} lengths, {os.cpu_count()} CPUs", flush=True)
            samples = asyncio.run(soak(srv, a.clients, a.minutes * 60, a.every, a.lengths == "fixed"))
        finally:
            code = srv.stop()
        if code != 0:
            raise SystemExit(f"batchlab serve exited {code}: {srv.log.read_text()[-2000:]}")
        folder = Path(tmp) / "serve" / "continuous"
        n_req, n_steps = rows(folder / "requests.csv"), rows(folder / "steps.csv")
        meta = json.loads((folder.parent / "meta.json").read_text())["continuous"]
    half = [s for s in samples if s[0] >= samples[-1][0] / 2]
    (t1, m1, r1, _), (t2, m2, r2, _) = half[0], half[-1]
    tables = (n_req * ROW_BYTES["requests"] + n_steps * ROW_BYTES["steps"]) / 2**20
    print(f"\n{n_req} requests, {n_steps} steps served; RSS {samples[0][1]:.1f} MiB idle, "
          f"max {max(s[1] for s in samples):.1f} MiB")
    print(f"second half ({t1:.0f}-{t2:.0f} s): RSS {m2 - m1:+.1f} MiB over {r2 - r1} requests "
          f"({(m2 - m1) / max(t2 - t1, 1e-9) * 60:+.2f} MiB/min); the whole run's tables in typed "
          f"columns: {tables:.1f} MiB")
    print(f"the server trimmed its heap {meta.get('heap_trims')} times, taking "
          f"{meta.get('heap_trim_s', 0) * 1e3:.0f} ms of engine time in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
