"""The server's own record of the replays (`batchlab serve --out DIR`, written when it stops):
its step table (each step's duration and features) and its request table (each request's
arrival at the engine and first token, on the server's clock). The client and the server
keep separate clocks, so each replay is found in the server's table by its requests: the
same prompt and output lengths (replay sends token ids, so the lengths are exact), sent in
the same pattern. The steps between a found replay's first arrival and its last finish are
its steps; a server's other traffic (another workload sent later) is never used.
batchlab serve stamps a request's arrival as its HTTP request reaches the app, so its
table's TTFT holds the app's own handling (parsing, tokenising, the hand-off to the engine
loop): measured_terms.py reads that off the requests that found the engine idle.
Every problem is a one-line ValueError naming the folder."""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batchlab.calibration.from_replay.predict import Case
from batchlab.core import text_input
from batchlab.core.run_folder import REQUESTS, find_runs

# A client request is the server's when it reached the engine within this of where the
# replay's first request puts it (the front end's delay and a burst's queue: tens of ms).
WINDOW_S = 0.25
MATCHED_SHARE = 0.9  # a replay is found when this share of its requests is


@dataclass(frozen=True)
class ServerRun:
    where: str
    steps: dict[str, np.ndarray]  # steps.csv's columns (core/run_folder.py read_steps)
    arrival: np.ndarray  # finished requests: arrival at the app (before parsing), first
    first_scheduled: np.ndarray  # scheduled, first token, finish (server clock)
    first_token: np.ndarray
    finish: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray


@dataclass(frozen=True)
class Found:
    """One replay found in the server's tables."""
    where: str
    server: np.ndarray  # per client request, its row in the server's request table (-1: not found)
    start_s: float  # the replay's span on the server's clock
    end_s: float

    @property
    def matched(self) -> np.ndarray:
        return self.server >= 0


def read_server_run(path: str | Path) -> ServerRun:
    runs = find_runs(path)
    served = [r for r in runs if r.meta.source == "serve"]
    if len(served) != 1:
        raise ValueError(f"{path}: {len(served)} batchlab serve runs; expected the --out of one batchlab serve "
                         f"(written when it stops)")
    run = served[0]
    if not run.has_steps():
        raise ValueError(f"{run.where}: no steps.csv; expected the --out of batchlab serve after it stopped")
    steps = run.steps()
    try:
        rows = list(csv.DictReader(io.StringIO(text_input.read_text(run.folder / REQUESTS))))
    except OSError as e:
        raise ValueError(f"{run.where}: cannot read {REQUESTS}: {e.strerror}") from None
    need = ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s", "prompt_len", "output_len", "status")
    cols: dict[str, list[float]] = {c: [] for c in need[:-1]}
    for k, r in enumerate(rows, 2):
        if r.get("status") != "finished":
            continue
        for c in cols:
            try:
                cols[c].append(float(r[c]))
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"{run.where}: {REQUESTS} row {k}: {c} is {r.get(c)!r}; expected a number, "
                                 f"as batchlab serve writes it") from None
    a = {c: np.array(v) for c, v in cols.items()}
    order = np.argsort(a["arrival_s"], kind="stable")
    return ServerRun(run.where, steps, a["arrival_s"][order], a["first_scheduled_s"][order],
                     a["first_token_s"][order], a["finish_s"][order],
                     a["prompt_len"][order].astype(np.int64), a["output_len"][order].astype(np.int64))


def _assign(case: Case, server: ServerRun, offset: float) -> tuple[np.ndarray, float]:
    """Each client request's server row at `offset` (server clock - client clock), the
    nearest unused one of its lengths within WINDOW_S; and the summed distance."""
    out, used, dist = np.full(len(case), -1), set(), 0.0
    w = case.workload
    for i in range(len(case)):
        t = w.arrival[i] + offset
        lo, hi = np.searchsorted(server.arrival, [t - WINDOW_S, t + WINDOW_S])
        best, gap = -1, WINDOW_S
        for j in range(lo, hi):
            if (j not in used and server.prompt_len[j] == w.prompt_len[i]
                    and server.output_len[j] == w.output_len[i] and abs(server.arrival[j] - t) <= gap):
                best, gap = j, abs(server.arrival[j] - t)
        if best >= 0:
            out[i] = best
            used.add(best)
            dist += gap
    return out, dist


def find(case: Case, server: ServerRun) -> Found | None:
    """The replay in the server's tables: the offset that finds most of its requests (each
    server request of the first one's lengths tried); None where under MATCHED_SHARE are."""
    w = case.workload
    if not len(case):
        return None
    first = np.flatnonzero((server.prompt_len == w.prompt_len[0]) & (server.output_len == w.output_len[0]))
    best: tuple[int, float, np.ndarray, float] | None = None
    for j in first:
        offset = float(server.arrival[j] - w.arrival[0])
        rows, dist = _assign(case, server, offset)
        n = int((rows >= 0).sum())
        if best is None or (n, -dist) > (best[0], -best[1]):
            best = (n, dist, rows, offset)
    if best is None or best[0] < MATCHED_SHARE * len(case):
        return None
    rows = best[2]
    hit = rows[rows >= 0]
    return Found(case.where, rows, float(server.arrival[hit].min()), float(server.finish[hit].max()))


def steps_within(server: ServerRun, found: list[Found]) -> np.ndarray:
    """Mask of the server's steps that started within a found replay's span."""
    start = server.steps["start_s"]
    mask = np.zeros(len(start), bool)
    for f in found:
        mask |= (start >= f.start_s) & (start <= f.end_s)
    return mask
