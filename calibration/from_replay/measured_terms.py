"""The terms a client's timings confuse, measured from the server's own tables where its run
folder is given (server_run.py): the per-chunk and after-idle step costs from its steps,
the front end from its requests, the serving loop's time between steps from the gaps
between its back-to-back steps. A measured term is held at its measurement by the fit of
the rest (fit.py `known`); one the tables cannot tell apart keeps its prior, said in one line.

Steps: each step's duration against its price with those terms taken out (its memory and
compute sides, each at a level of its own: the machine's speed that day, which moved them
apart by 1.5x on this project's VM) plus each term's own feature (a chunk in the step, the
step after an idle gap), fitted on the log ratio with a soft-L1 loss so a
step that lost its core pulls little (as calibration/fit/served_steps.py does). A term is
measured where MIN_STEPS steps carry it, no other column moves with it beyond CORRELATED,
and its sd is at most SHRINK_MAX of its value or its prior, the larger (run C of
docs/results/2026-12-06-engineers-loop.md: 35 +- 2 ms after idle against a prior of 1);
else it stays the prior's.

Front end: per request the client's TTFT minus the server's (its first token less its
arrival at the app, both on the server's clock), plus the app's own handling before the
engine sees it (the median time from arrival to being scheduled of the requests that found
the engine idle, where nothing else delays them): what core/front_end.py puts before the
engine. For a
handling time s the front end's queue gives each request its wait g(s) beyond the delay,
exactly (the delay shifts every arrival alike), so the delay is the median of gap - g(s),
and s is the one of a grid with the least absolute error. With fewer than MIN_QUEUED
requests sent while another is still in the front end (at that s), s is told only with
the delay: it keeps its prior and the delay is fitted beside it.

Loop: the gap before each step that found work at once (core/cost/loop_time.py table_gaps),
fitted as a cost a step plus a cost a sequence of the step that follows: batchlab serve
streams each sequence's token to its client between steps, on the cores the engine uses
(run D of docs/results/2026-12-06-engineers-loop.md: 0.52 ms + 0.094 ms a sequence,
where the prior carried a sweep's 0.11 ms + 0.006 ms). The fit then simulates with it
(run.py), and the profile it writes carries it."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from batchlab.calibration.from_replay.fit import REQUEST_OVERHEAD, SERIAL, SERIAL_PRIOR
from batchlab.calibration.from_replay.predict import Case
from batchlab.calibration.from_replay.server_run import Found, ServerRun, find, steps_within
from batchlab.calibration.from_replay.space import ParamSpace
from batchlab.core.cost.loop_time import Overhead, fit_gaps, table_gaps
from batchlab.core.front_end import FrontEnd
from batchlab.core.step_table import distinct_step_features

STEP_TERMS = ("per_chunk_s", "chunk_s", "after_idle_s")  # the fitted form's, the GPU form's names
MIN_STEPS = 5
CORRELATED = 0.9
SHRINK_MAX = 0.5
ROBUST_SCALE = 0.05  # soft-L1 turns linear beyond a 5% log ratio (served_steps.py)
MIN_COMPUTE_SHARE = 0.05  # of the steps' price, for a compute level of its own (served_steps.py)
SERIAL_GRID = np.concatenate(([0.0], np.geomspace(1e-4, 0.05, 40)))  # seconds
MIN_QUEUED = 5


@dataclass
class Measured:
    values: dict[str, float] = field(default_factory=dict)  # by term name: held there by the fit
    lines: list[str] = field(default_factory=list)  # what was measured, what kept its prior and why
    steps: int = 0  # server steps used
    requests: int = 0  # requests found in the server's table
    loop: Overhead | None = None  # the serving loop's time between steps, where measured


def _columns(space: ParamSpace, names: list[str], steps: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(each step's price with `names` at 0, in two sides: fixed costs and memory traffic
    with the other context terms, and compute; each name's feature column: its price per
    second). A side under MIN_COMPUTE_SHARE of the price is folded into the other: the
    steps cannot tell its level."""
    feats, inverse = distinct_step_features(steps)
    prior = dict(zip(space.names, space.prior))
    zero = {n: 0.0 for n in names}
    form = space.fitted({**prior, **zero})

    def priced(values: dict[str, float]) -> np.ndarray:
        f = space.fitted({**prior, **values})
        return np.array([f.step_time(x) for x in feats], dtype=float)
    rest = priced(zero)
    comp = np.array([form.parts(x)[1] for x in feats], dtype=float)
    sides = np.column_stack([rest - comp, comp])[inverse]
    if sides[:, 1].sum() < MIN_COMPUTE_SHARE * sides.sum():
        sides = sides.sum(axis=1, keepdims=True)
    cols = [(priced({**zero, n: 2 * prior[n]}) - rest) / (2 * prior[n]) for n in names]
    return sides, np.column_stack(cols)[inverse] if cols else np.zeros((len(inverse), 0))


def step_terms(space: ParamSpace, steps: dict[str, np.ndarray], out: Measured) -> None:
    prior = dict(zip(space.names, space.prior))
    names = [n for n in STEP_TERMS if n in prior]
    y = steps["duration_s"]
    ok = y > 0
    steps, y = {k: v[ok] for k, v in steps.items()}, y[ok]
    if y.size < MIN_STEPS:
        out.lines += [f"{n}: held at the prior's {prior[n] * 1e3:.3f} ms: {y.size} server steps during the "
                      f"requests fitted on (at least {MIN_STEPS})" for n in names]
        return
    spread: dict[str, float] = {}  # each measured term's sd
    for _ in range(2):  # a term that cannot be told goes back to its prior: once more without it
        if not names:
            break
        sides, cols = _columns(space, names, steps)  # a term held: at its prior within the rest
        k0 = sides.shape[1]  # the sides' levels: the machine's speed that day
        X = np.column_stack([sides, cols]) / y[:, None]
        scale = np.abs(X).max(axis=0)
        scale[scale == 0] = 1.0
        A = X / scale
        x0 = np.concatenate((np.ones(k0), [prior[n] for n in names])) * scale
        lo = np.concatenate((1e-3 * scale[:k0], np.zeros(len(names))))
        sol = least_squares(lambda z: np.log(np.maximum(A @ z, 1e-12)), np.maximum(x0, lo + 1e-12),
                            jac=lambda z: A / np.maximum(A @ z, 1e-12)[:, None], bounds=(lo, np.inf),
                            loss="soft_l1", f_scale=ROBUST_SCALE, method="trf")
        J = A / np.maximum(A @ sol.x, 1e-12)[:, None]
        r = np.log(np.maximum(A @ sol.x, 1e-12))
        s2 = max(float(np.median(np.abs(r)) * 1.4826) ** 2, 1e-8)
        cov = np.linalg.pinv(J.T @ J) * s2
        sd = np.sqrt(np.maximum(np.diag(cov), 0)) / scale
        corr = cov / np.maximum(np.outer(np.sqrt(np.diag(cov)), np.sqrt(np.diag(cov))), 1e-300)
        value = sol.x / scale
        keep = []
        side = ("the fixed and memory costs", "the compute side") if k0 == 2 else ("the rest of the step's price",)
        for k, n in enumerate(names, k0):
            carried = int((cols[:, k - k0] > 0).sum())
            others = [(abs(corr[k, j]), side[j] if j < k0 else names[j - k0])
                      for j in range(len(names) + k0) if j != k]
            c, partner = max(others) if others else (0.0, "")
            if carried < MIN_STEPS:
                out.lines.append(f"{n}: held at the prior's {prior[n] * 1e3:.3f} ms: {carried} server steps carry it "
                                 f"(at least {MIN_STEPS})")
            elif c > CORRELATED:
                out.lines.append(f"{n}: held at the prior's {prior[n] * 1e3:.3f} ms: in the server's steps it "
                                 f"moves only with {partner} (correlation {c:.2f})")
            elif sd[k] > SHRINK_MAX * max(value[k], prior[n]):
                out.lines.append(f"{n}: held at the prior's {prior[n] * 1e3:.3f} ms: the server's steps tell it "
                                 f"only to +-{sd[k] * 1e3:.3f} ms")
            else:
                keep.append(n)
                out.values[n], spread[n] = float(value[k]), float(sd[k])
        if keep == names:
            break
        for n in names:
            out.values.pop(n, None)
        names = keep
    out.lines[:0] = [f"{n}: {out.values[n] * 1e3:.3f} +- {spread[n] * 1e3:.3f} ms, measured from {y.size} server "
                     f"steps (the prior's {prior[n] * 1e3:.3f} ms)" for n in names if n in out.values]


def loop_time(steps: dict[str, np.ndarray], prior: Overhead | None, out: Measured) -> None:
    """The loop's time between back-to-back steps (the module's "Loop")."""
    gaps, seqs = table_gaps(steps)
    was = "none" if prior is None else f"{prior.per_step_s * 1e3:.3f} ms + {prior.per_seq_s * 1e3:.4f} ms a sequence"
    if gaps.size < MIN_STEPS:
        out.lines.append(f"the serving loop's time between steps: held at the prior's ({was}): {gaps.size} "
                         f"back-to-back server steps (at least {MIN_STEPS})")
        return
    out.loop = fit_gaps(gaps, seqs)
    out.lines.append(f"the serving loop's time between steps: {out.loop.per_step_s * 1e3:.3f} ms + "
                     f"{out.loop.per_seq_s * 1e3:.4f} ms a sequence, measured from {gaps.size} gaps between "
                     f"back-to-back server steps (mean {out.loop.mean_gap_s * 1e3:.3f} ms; the prior's: {was})")


def queue_waits(sends: list[np.ndarray], serial: float) -> np.ndarray:
    """Each request's time in the front end beyond its delay, at handling time `serial`."""
    return np.concatenate([FrontEnd(0.0, serial).arrivals(s)[0] - s for s in sends]) if sends else np.zeros(0)


def _best_front(sends: list[np.ndarray], gaps: np.ndarray, grid: np.ndarray) -> tuple[float, float]:
    """(handling time, delay) of `grid` with the least absolute error."""
    best = None
    for s in grid:
        g = queue_waits(sends, float(s))
        d = max(0.0, float(np.median(gaps - g)))
        err = float(np.abs(gaps - g - d).sum())
        if best is None or err < best[0] - 1e-12:
            best = (err, float(s), d)
    return best[1], best[2]


def handling(server: ServerRun, rows: np.ndarray, out: Measured) -> float:
    """The app's median time from a request's arrival to its first step, over the requests
    (`rows`) that found the engine idle (their first step follows an idle gap); 0, said so,
    where fewer than MIN_STEPS did."""
    steps = server.steps
    at = np.searchsorted(steps["start_s"], server.first_scheduled[rows] - 1e-9)
    ok = at < len(steps["start_s"])
    idle = np.zeros(len(rows), bool)
    idle[ok] = steps["after_idle"][at[ok]] > 0
    waits = (server.first_scheduled[rows] - server.arrival[rows])[idle]
    if waits.size < MIN_STEPS:
        out.lines.append(f"the server's own handling before the engine: not measured ({waits.size} requests "
                         f"found the engine idle, at least {MIN_STEPS}): the front end holds the client's part only")
        return 0.0
    return float(np.median(waits))


def front_end(sends: list[np.ndarray], gaps: np.ndarray, out: Measured, within: float = 0.0) -> None:
    """sends: per replay its found requests' send times (in order); gaps: client TTFT - the
    server's TTFT; within: the server's own handling before the engine."""
    gaps = gaps + within
    if gaps.size < MIN_STEPS:
        out.lines.append(f"front end: held at the prior's: {gaps.size} requests found in the server's table")
        return
    serial, delay = _best_front(sends, gaps, SERIAL_GRID)
    # The handling time is told only by requests that wait behind another at that time.
    at = max(serial, float(SERIAL_GRID[1]))
    queued = int(sum((FrontEnd(0.0, at).arrivals(s)[1] > 0).sum() for s in sends))
    if queued < MIN_QUEUED:
        serial, delay = _best_front(sends, gaps, np.array([SERIAL_PRIOR]))
    out.values[REQUEST_OVERHEAD] = delay
    out.lines.append(f"{REQUEST_OVERHEAD}: {delay * 1e3:.2f} ms, measured: the client's TTFT less the server's "
                     f"and {within * 1e3:.2f} ms of its handling before the engine (median {np.median(gaps) * 1e3:.2f} "
                     f"ms over {gaps.size} requests)")
    if queued >= MIN_QUEUED:
        out.values[SERIAL] = serial
        out.lines.append(f"{SERIAL}: {serial * 1e3:.2f} ms, measured from {queued} requests sent while another "
                         f"was in the front end")
    else:
        out.lines.append(f"{SERIAL}: held at the prior's {SERIAL_PRIOR * 1e3:.2f} ms: only {queued} requests were "
                         f"sent while another was in the front end (at {at * 1e3:.2f} ms a request), so it is "
                         f"told only with {REQUEST_OVERHEAD}")


def measure(cases: list[Case], masks: list[np.ndarray], server: ServerRun, space: ParamSpace,
            prior_loop: Overhead | None = None) -> Measured:
    """The terms the server's tables measure over the requests fitted on (`masks`, per case):
    the held-out requests' steps and front end are never used, so the verdict stays fair."""
    out = Measured()
    found: list[Found] = []
    for c, m in zip(cases, masks):
        if not m.any():
            continue
        f = find(c, server)
        if f is None:
            out.lines.append(f"{c.where}: not found in {server.where}'s requests (the same lengths, sent in "
                             f"the same pattern): its steps and front end are not used")
            continue
        rows = np.where(m, f.server, -1)
        hit = rows[rows >= 0]
        if hit.size:
            found.append(Found(f.where, rows, float(server.arrival[hit].min()), float(server.finish[hit].max())))
    by_where = {c.where: c for c in cases}
    sends, gaps, rows_all = [], [], []
    for f in found:
        c, m = by_where[f.where], f.matched
        rows = f.server[m]
        sends.append(c.workload.arrival[m])
        gaps.append(c.ttft[m] - (server.first_token[rows] - server.arrival[rows]))
        rows_all.append(rows)
    out.requests = int(sum(s.size for s in sends))
    mask = steps_within(server, found)
    out.steps = int(mask.sum())
    if found:
        within = {k: v[mask] for k, v in server.steps.items()}
        step_terms(space, within, out)
        loop_time(within, prior_loop, out)
        front_end(sends, np.concatenate(gaps), out, handling(server, np.concatenate(rows_all), out))
    return out
