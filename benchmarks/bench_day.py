"""A day of traffic at production scale (issue 48 item 4): `batchlab simulate` on N
synthetic chat requests arriving over one day (rate N / 86,400 s), dealt round-robin to R
replicas that run in W processes (--workers W, sim/replica_groups), no step table, the
default price. It prints the wall seconds, the CPU seconds of every process (the kernel's
accounting of the child and its workers), the peak memory of all the processes together
(their proportional set sizes summed, sampled every 20 ms: a page a forked worker still
shares with its parent counts once, split between them) and requests per CPU-second,
beside the peers' figures.

    python benchmarks/bench_day.py [--requests 10000000] [--replicas 100] [--workers 2]
                                   [--check]

--check also runs the same command with --workers 1 and says whether the two printed the
same JSON, byte for byte (at 10,000,000 requests that run takes about twice the time and
as much memory in one process)."""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from bench_default_price import machine  # beside this script

ROOT = Path(__file__).resolve().parents[1]
DAY_S = 86_400.0
SAMPLE_S = 0.02
# Reading a multi-GiB process's smaps_rollup walks its page tables (~14 ms a sample at
# 10M): every 20 ms, the sampler took much of a core from the two simulating (10M: 89 s
# wall, 74 s unwatched). Each wait is at least this many times the last sample's own CPU
# time, so the sampler takes under a tenth of one core (its figures are printed).
SAMPLER_SHARE = 10
# Requests per CPU-second of the peers, whole processes (start-up included) and the
# simulation alone, on the Azure conv trace (19,366 requests, one replica of Llama-3-8B on
# an A100), measured here in one run: docs/results/2026-12-06-peers-speed.md.
PEERS = [("Vidur 0.0.26 (measured here, conv trace, one replica)", 19_366 / 44.61, 1e6 / 1_745.5),
         ("batchlab, the same work (measured beside it)", 19_366 / 2.13, 1e6 / 38.2)]
BLIS = ("BLIS (inference-sim) states no figure (its README: \"CPU-only, extremely fast\"); it "
        "could not be built here (docs/results/2026-12-06-peers-speed.md)")


def command(n: int, rate: float, replicas: int, workers: int) -> list[str]:
    return [sys.executable, "-m", "batchlab", "simulate", "--workload", "chat", "--num-requests", str(n),
            "--rate", repr(rate), "--replicas", str(replicas), "--policy", "chunked",
            "--no-step-table", "--format", "json", "--workers", str(workers)]


class PeakMemory:
    """The largest sum of resident sets of a process and its descendants, sampled."""

    def __init__(self, pid: int) -> None:
        self.proc, self.peak, self._stop = psutil.Process(pid), 0, threading.Event()
        self.samples, self.cpu_s = 0, 0.0  # the sampler's own count and CPU seconds
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            t0, total = time.thread_time(), 0
            try:
                for p in [self.proc, *self.proc.children(recursive=True)]:
                    total += pss(p.pid)
            except (psutil.Error, OSError):  # one ended between listing and reading
                pass
            self.peak = max(self.peak, total)
            took = time.thread_time() - t0
            self.samples, self.cpu_s = self.samples + 1, self.cpu_s + took
            self._stop.wait(max(SAMPLE_S, SAMPLER_SHARE * took))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def pss(pid: int) -> int:
    """Bytes: the process's proportional set size (Linux's smaps_rollup)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    raise OSError(f"no Pss in /proc/{pid}/smaps_rollup")


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    before, t0 = children_cpu(), time.perf_counter()
    p = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    mem = PeakMemory(p.pid)
    out, err = p.communicate()
    wall, peak = time.perf_counter() - t0, mem.stop()
    sampler = f"{mem.samples} memory samples, {mem.cpu_s:.1f} CPU s of this process's"
    cpu = children_cpu() - before  # the child's, and its workers' (waited for by it)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed: {err.strip()[-600:]}")
    for line in err.splitlines():
        if line.startswith("batchlab:"):  # e.g. a stale build running as pure Python
            print(f"  WARNING: {line}")
    return {"wall": wall, "cpu": cpu, "peak": peak, "out": out, "sampler": sampler}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=10_000_000)
    ap.add_argument("--rate", type=float, help="requests/s (default: --requests over one day; "
                    "115.74 is 10,000,000 a day: a slice of that day)")
    ap.add_argument("--replicas", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--check", action="store_true", help="also run --workers 1 and compare the JSON")
    args = ap.parse_args()
    pure = os.environ.get("BATCHLAB_PURE", "") not in ("", "0")
    n = args.requests
    rate = args.rate or n / DAY_S
    print(f"machine: {machine()}; python {sys.version.split()[0]}; {'pure' if pure else 'compiled'} build")
    print(f"{n:,} synthetic chat requests at {rate:.2f} req/s ({n / rate / 3600:.1f} h), round-robin over "
          f"{args.replicas} replicas, chunked, default price, no step table")
    runs = {args.workers: timed(command(n, rate, args.replicas, args.workers))}
    if args.check and args.workers != 1:
        runs[1] = timed(command(n, rate, args.replicas, 1))
    for w, r in runs.items():
        print(f"  --workers {w}: {r['wall']:.1f} s wall, {r['cpu']:.1f} CPU s, peak memory of all "
              f"processes {r['peak'] / 2**30:.2f} GiB, "
              f"{n / r['cpu']:,.0f} requests per CPU-second ({r['sampler']})")
    if len(runs) > 1:
        same = runs[args.workers]["out"] == runs[1]["out"]
        print(f"--workers {args.workers} and --workers 1 printed {'the same' if same else 'DIFFERENT'} JSON")
    print("peers, requests per CPU-second (whole process / simulation alone):")
    for name, whole, sim in PEERS:
        print(f"  {name}: {whole:,.0f} / {sim:,.0f}")
    print(f"  {BLIS}")


if __name__ == "__main__":
    main()
