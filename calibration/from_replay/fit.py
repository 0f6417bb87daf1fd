"""The fit: the parameters of a cost form (space.py) that make the simulated request list
match the observed per-request timings, and what those timings can tell about each.

Objective: per request log(simulated / observed) of TTFT and of TPOT (the mean inter-token
gap), in units of NOISE, the request-level spread of served timings, plus a weak log-normal
prior on each parameter around the prior's value (sd PRIOR_SD). Solved with
scipy.optimize.least_squares (trust-region reflective): the residuals are many and the
parameters few, it takes the residual vector rather than a scalar, keeps the log-parameters
within bounds, and its soft_l1 loss lets a request timed far off (a hiccup of the server)
pull linearly rather than quadratically. Its Jacobian is sensitivity.py's, the schedule
held: batch composition changes in jumps as the costs move, which finite differences would
read as slopes; the residuals themselves always come from a full simulation.

Identifiability (Laplace approximation at the fit): the Jacobian J of the data residuals
gives the posterior precision J'J/s^2 + I/PRIOR_SD^2 (s: the residuals' own scale, at least
NOISE). The fit is the posterior's mode, so along any combination the data do not reach
the prior holds by construction: nothing is invented there. Each term is then reported as
- told: its posterior sd at most SHRINK_MAX of the prior's (the data narrow it 2x or more);
- together: narrowed less, yet part of a combination the data tell (two terms that both cost
  a fixed time a step, say): the combination is fitted, its split follows the prior; the
  terms it moves with are named;
- weak: narrowed less, on its own: fitted, with the wide uncertainty it states;
- untold: its posterior sd above UNTOLD of the prior's (one load, one prompt length: the data
  never varied what it scales with): held exactly at the prior, the rest refitted, until
  the terms held are the ones the refit finds untold (at most ROUNDS fits);
- measured: given (`known`: the server's own step and request tables measured it,
  measured_terms.py), held there, not fitted.
The terms a client's timings confuse most easily (APART: the per-chunk and after-idle step
costs, the front end's two) are held at the prior as untold wherever they would be told
only together with others: a front end fitted to 27 ms where 4-5 were measured absorbed
what the step price missed (docs/results/2026-12-06-engineers-loop.md).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from batchlab.calibration.fit.posterior import spread
from batchlab.calibration.from_replay.predict import Case
from batchlab.calibration.from_replay.sensitivity import frozen_jacobian
from batchlab.calibration.from_replay.space import ParamSpace
from batchlab.core.config import SchedulerConfig
from batchlab.core.front_end import FrontEnd

NOISE = 0.15  # log-ratio sd of one request's timing between served runs (docs/MEASURING: ~12-17%)
PRIOR_SD = math.log(4.0)  # the prior is trusted to within ~4x either way
BOUND = math.log(100.0)  # no parameter moves beyond 100x its prior
MISSING = math.log(10.0)  # a request the simulator did not finish: as if 10x off
SHRINK_MAX = 0.5  # posterior sd / prior sd at most this: the data tell the parameter
UNTOLD = 0.9  # above this the data say next to nothing of it: it stays exactly the prior's
CORRELATED = 0.9  # pairs reported as told only together
ROUNDS = 3  # refits at most, each holding the terms the last one found untold
PARTNER = 0.5  # a term told only in combination names those it correlates with beyond this
MAX_NFEV = 60  # residual evaluations a pass (each simulates every replay once)
# What a client's TTFT holds beyond the engine's (predict.py FrontEnd): a delay a request
# and a serial handling time. Not step costs: fitted beside the form, kept out of the
# profile (measured on batchlab serve: ~50 ms between the client's TTFT and the server's).
REQUEST_OVERHEAD = "request_overhead_s"
REQUEST_OVERHEAD_PRIOR = 0.005
SERIAL = "frontend_serial_s"
SERIAL_PRIOR = 0.002
FRONT = (REQUEST_OVERHEAD, SERIAL)
# Fitted from client timings only where those tell them apart from every other term.
APART = ("per_chunk_s", "chunk_s", "after_idle_s", REQUEST_OVERHEAD, SERIAL)


@dataclass
class Term:
    name: str
    prior: float
    value: float
    sd_factor: float  # the posterior's sd as a factor (1.3: +-30%)
    shrink: float  # posterior sd / prior sd: 1 = the data say nothing
    status: str  # told | together (with `partners`) | weak | untold (the prior's) | measured (known)
    partners: list[str] = field(default_factory=list)  # the terms it is most correlated with

    @property
    def told(self) -> bool:
        return self.status == "told"


@dataclass
class FitResult:
    values: dict[str, float]  # every parameter of the space, fitted or held
    terms: list[Term]
    held: list[str]  # the form's parameters not fitted at all (space.held)
    together: list[tuple[str, str, float]]  # (a, b, correlation): told only as a combination
    residuals: int  # request timings fitted on
    rms: float  # of the log ratios at the fit
    nfev: int
    seconds: float

    @property
    def untold(self) -> list[str]:
        return [t.name for t in self.terms if t.status == "untold"]


@dataclass
class Problem:
    cases: list[Case]
    masks: list[np.ndarray]  # per case, the requests fitted on
    sched: SchedulerConfig
    space: ParamSpace
    _memo: dict = field(default_factory=dict)
    tick: Callable[[], None] | None = None  # called after each simulation of the fitted requests (progress)
    known: dict[str, float] = field(default_factory=dict)  # measured elsewhere: held there

    @property
    def names(self) -> tuple[str, ...]:
        return (*self.space.names, *FRONT)

    @property
    def prior(self) -> tuple[float, ...]:
        return (*self.space.prior, REQUEST_OVERHEAD_PRIOR, SERIAL_PRIOR)

    @property
    def center(self) -> tuple[float, ...]:
        """Where z = 0 lies: the prior, a measured term at its measurement."""
        return tuple(self.known.get(n, p) for n, p in zip(self.names, self.prior))

    def values(self, z: np.ndarray) -> dict[str, float]:
        return {n: p * math.exp(v) for n, p, v in zip(self.names, self.center, z)}

    def evaluate(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """log(simulated / observed) of each fitted request's TTFT and TPOT, and its
        derivative in each log-parameter (sensitivity.py: the schedule held)."""
        key = tuple(np.round(z, 12))
        if key in self._memo:
            return self._memo[key]
        values = self.values(z)
        front = FrontEnd(values.pop(REQUEST_OVERHEAD), values.pop(SERIAL))
        rs, js = [], []
        for case, mask in zip(self.cases, self.masks):
            ttft, tpot, dttft, dtpot, links = frozen_jacobian(case, self.sched, self.space, values, front)
            n = len(case)
            dttft = np.hstack([dttft, np.full((n, 1), front.delay_s), (front.serial_s * (1 + links))[:, None]])
            dtpot = np.hstack([dtpot, np.zeros((n, 2))])
            for sim, d, obs in ((ttft, dttft, case.ttft), (tpot, dtpot, case.tpot)):
                use = mask & np.isfinite(obs)
                ok = np.isfinite(sim[use]) & (sim[use] > 0)
                with np.errstate(invalid="ignore", divide="ignore"):
                    r = np.where(ok, np.log(sim[use] / obs[use]), MISSING)
                    j = np.where(ok[:, None], d[use] / sim[use][:, None], 0.0)
                rs.append(r)
                js.append(j)
        out = (np.concatenate(rs), np.concatenate(js))
        if self.tick is not None:
            self.tick()
        self._memo = {key: out}  # the last point only: least_squares asks fun then jac there
        return out

    def data_residuals(self, z: np.ndarray) -> np.ndarray:
        return self.evaluate(z)[0]


def _solve(p: Problem, free: list[int], z0: np.ndarray) -> tuple[np.ndarray, int]:
    def full(x: np.ndarray) -> np.ndarray:
        z = z0.copy()
        z[free] = x
        return z

    def res(x: np.ndarray) -> np.ndarray:
        return np.concatenate([p.evaluate(full(x))[0] / NOISE, x / PRIOR_SD])

    def jac(x: np.ndarray) -> np.ndarray:
        J = p.evaluate(full(x))[1][:, free] / NOISE
        return np.vstack([J, np.eye(len(free)) / PRIOR_SD])

    if not free:
        return z0, 0
    sol = least_squares(res, z0[free], jac=jac, method="trf", loss="soft_l1", f_scale=1.0,
                        bounds=(-BOUND, BOUND), max_nfev=MAX_NFEV, x_scale=1.0)
    return full(sol.x), int(sol.nfev)


def _spread(p: Problem, z: np.ndarray, live: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(sd, correlation) of every log-parameter at z (calibration/fit/posterior.py); a
    measured one: sd 0, uncorrelated."""
    k = len(p.names)
    r, J = p.evaluate(z)
    sd, corr = np.zeros(k), np.eye(k)
    sd[live], corr[np.ix_(live, live)] = spread(J[:, live], r, NOISE, PRIOR_SD)
    return sd, corr


def fit(cases: list[Case], masks: list[np.ndarray], sched: SchedulerConfig, space: ParamSpace,
        tick: Callable[[], None] | None = None, known: dict[str, float] | None = None) -> FitResult:
    """known: terms measured elsewhere (by name, seconds), held at those values."""
    t0 = time.perf_counter()
    p = Problem(cases, masks, sched, space, tick=tick, known=dict(known or {}))
    k = len(p.names)
    live = [i for i, n in enumerate(p.names) if n not in p.known]
    z, nfev, untold = np.zeros(k), 0, []

    def partners(i: int, corr: np.ndarray, held: list[int]) -> list[str]:
        return [p.names[j] for j in np.argsort(-np.abs(corr[i]))
                if j != i and j in live and j not in held and abs(corr[i, j]) > PARTNER][:3]

    def held_now(sd: np.ndarray, corr: np.ndarray) -> list[int]:
        return [i for i in live if sd[i] / PRIOR_SD > UNTOLD
                or (p.names[i] in APART and sd[i] / PRIOR_SD > SHRINK_MAX and partners(i, corr, untold))]
    for _ in range(ROUNDS):  # until the terms held are those the data say nothing of
        z, more = _solve(p, [i for i in live if i not in untold], z)
        nfev += more
        sd, corr = _spread(p, z, live)
        now = held_now(sd, corr)
        if now == untold:
            break
        untold = now
        z[untold] = 0.0  # exactly the prior
    else:  # not settled: the last set found untold stays held
        z, more = _solve(p, [i for i in live if i not in untold], z)
        nfev += more
        sd, corr = _spread(p, z, live)
    r = p.data_residuals(z)
    shrink = sd / PRIOR_SD
    together = [(p.names[i], p.names[j], float(corr[i, j])) for i in live for j in live
                if i < j and i not in untold and j not in untold and abs(corr[i, j]) > CORRELATED]

    def status(i: int) -> str:
        if i not in live:
            return "measured"
        if i in untold:
            return "untold"
        if shrink[i] <= SHRINK_MAX:
            return "told"
        return "together" if partners(i, corr, untold) else "weak"
    values = p.values(z)
    terms = [Term(n, pv, values[n], math.exp(sd[i]), float(shrink[i]), status(i), partners(i, corr, untold))
             for i, (n, pv) in enumerate(zip(p.names, p.prior))]
    return FitResult(values, terms, list(space.held), together, int(r.size),
                     float(np.sqrt(np.mean(r ** 2))) if r.size else math.nan, nfev,
                     time.perf_counter() - t0)
