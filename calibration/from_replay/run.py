"""The whole fit from request timings: the replays read, their engine settings, the prior
(a profile), the fit (fit.py) on some replays and the judgement on the others, and the
profile it writes (made.py): the fit's, or the prior's where it did better on the
held-out requests (verdict.py). Every problem is a one-line ValueError."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from batchlab.calibration.from_replay.fit import (REQUEST_OVERHEAD, REQUEST_OVERHEAD_PRIOR, SERIAL, SERIAL_PRIOR,
                                                  FitResult, fit)
from batchlab.calibration.from_replay.judge import Errors, errors, noise_floor
from batchlab.calibration.from_replay.made import Made, quality
from batchlab.calibration.from_replay.measured_terms import Measured, measure
from batchlab.calibration.from_replay.observed import ObservedReplay
from batchlab.calibration.from_replay.predict import Case, predict
from batchlab.calibration.from_replay.server_run import ServerRun
from batchlab.calibration.from_replay.settings import EngineSettings
from batchlab.calibration.from_replay.space import ParamSpace, prior_space
from batchlab.calibration.from_replay.verdict import WRITTEN_PRIOR, Verdict, decide, regime
from batchlab.core.front_end import FrontEnd
from batchlab.core.cost.profile import Profile

HOLDOUT_SHARE = 0.25  # one replay only: the requests sent last are judged, not fitted


@dataclass
class ReplayFit:
    profile: Profile
    fit: FitResult
    settings: EngineSettings
    replays: list[ObservedReplay]
    fitted_on: list[str]
    judged_on: list[str]
    heldout: Errors | None  # the fitted profile on the held-out requests
    heldout_prior: Errors | None  # the prior on them
    train: Errors
    floor: Errors | None  # the server's own spread
    floor_from: str
    verdict: Verdict  # which profile is written (the fit's or the prior's) and why
    per_replay: list[tuple[str, Errors, Errors]] = field(default_factory=list)  # judged: (where, fit, prior)
    measured: Measured | None = None  # the terms the server's own tables measured (--server-run)


def model_matches(model: str | None, profile: Profile) -> bool:
    if not model:
        return True
    names = {profile.model.name, profile.model_source, profile.model_source.rstrip("/").rsplit("/", 1)[-1]}
    return model in names or model.rstrip("/").rsplit("/", 1)[-1] in names


def split(cases: list[Case], holdout_every: int, held: list[bool] | None = None
          ) -> tuple[list[np.ndarray], list[np.ndarray], list[str], list[str]]:
    """(fit masks, judge masks, fitted on, judged on), per case; `held` names the cases
    judged (else one in holdout_every)."""
    n = len(cases)
    if n == 1 and held is None:
        c = cases[0]
        k = len(c)
        cut = k - max(1, round(k * HOLDOUT_SHARE)) if holdout_every else k
        idx = np.arange(k)
        return [idx < cut], [idx >= cut], [f"{c.where} (first {cut} requests)"], \
            [f"{c.where} (last {k - cut} requests)"] if cut < k else []
    if held is None:
        held = [bool(holdout_every) and i % holdout_every == 1 for i in range(n)]
    ones = [np.ones(len(c), bool) for c in cases]
    zeros = [np.zeros(len(c), bool) for c in cases]
    fit_m = [z if h else o for h, o, z in zip(held, ones, zeros)]
    judge_m = [o if h else z for h, o, z in zip(held, ones, zeros)]
    return fit_m, judge_m, [c.where for c, h in zip(cases, held) if not h], \
        [c.where for c, h in zip(cases, held) if h]


def judged(space: ParamSpace, values: dict, cases: list[Case], masks: list[np.ndarray],
           settings: EngineSettings) -> Errors | None:
    """The per-request error of `values` (the front end's among them, else none)."""
    values = dict(values)
    front = FrontEnd(values.pop(REQUEST_OVERHEAD, 0.0), values.pop(SERIAL, 0.0))
    cost, sched = space.priced(values), settings.scheduler()
    parts = []
    for c, m in zip(cases, masks):
        if m.any():
            t, p = predict(c, sched, cost, front)
            parts.append((t[m], p[m], c.ttft[m], c.tpot[m]))
    return errors(parts)


def check_servable(cases: list[Case], settings: EngineSettings, prior: Profile) -> None:
    """Every request the server served, the simulated engine serves too: else its settings
    are not the server's (a KV pool too small for a prompt, say), a one-line ValueError."""
    sched, cost = settings.scheduler(), prior.simulation_cost()
    for c in cases:
        ttft, _ = predict(c, sched, cost)
        lost = np.flatnonzero(~np.isfinite(ttft))
        if lost.size:
            i = int(lost[0])
            raise ValueError(
                f"{c.where}: the engine settings ({'; '.join(settings.lines())}) cannot serve {lost.size} "
                f"of its requests the server served (the first: a prompt of {c.workload.prompt_len[i]} and "
                f"{c.workload.output_len[i]} out); give the server's --num-kv-blocks / --block-size")


def from_replays(replays: list[ObservedReplay], prior: Profile, prior_where: str,
                 settings: EngineSettings, holdout_every: int = 3, held: list[bool] | None = None,
                 same_model: bool = True, tick: Callable[[], None] | None = None,
                 keep_fit: bool = False, server: ServerRun | None = None) -> ReplayFit:
    """same_model: the replays must name the prior's model (False: a roofline prior, whose
    preset the user chose to stand for the server's model); tick: called after each of the
    fit's simulations (progress); keep_fit: write the fit even where the prior did better
    on the held-out requests; server: the server's own tables (batchlab serve --out), which
    measure the step and front-end terms a client's timings confuse (measured_terms.py)."""
    for r in replays:
        if same_model and not model_matches(r.model, prior):
            raise ValueError(f"{r.where}: a replay of model {r.model!r}, but the prior {prior_where} "
                             f"prices {prior.model_source or prior.model.name!r}")
    cases = [Case.of(r) for r in replays]
    check_servable(cases, settings, prior)
    fit_m, judge_m, fitted_on, judged_on = split(cases, holdout_every, held)
    prior_loop = prior.loop_overhead()
    space = prior_space(prior.cost_model(), prior.model, prior_loop)
    sched = settings.scheduler()
    measured = measure(cases, fit_m, server, space, prior_loop) if server is not None else None
    loop = measured.loop if measured else None
    if loop is not None:  # the server's own loop, simulated by the fit and written with it
        space = prior_space(prior.cost_model(), prior.model, loop)
    result = fit([c for c, m in zip(cases, fit_m) if m.any()], [m for m in fit_m if m.any()], sched, space,
                 tick, measured.values if measured else None)
    heldout = judged(space, result.values, cases, judge_m, settings)
    prior_front = {REQUEST_OVERHEAD: REQUEST_OVERHEAD_PRIOR, SERIAL: SERIAL_PRIOR}
    before = judged(space, prior_front, cases, judge_m, settings)
    train = judged(space, result.values, cases, fit_m, settings)
    floor, floor_from = noise_floor(cases)
    per_replay = []
    for c, m in zip(cases, judge_m):
        if m.any():
            one = [np.ones(len(c), bool) & m]
            per_replay.append((c.where, judged(space, result.values, [c], one, settings),
                               judged(space, prior_front, [c], one, settings)))
    endpoints = {r.endpoint for r in replays if r.endpoint}
    made = Made(prior, space, settings, fitted_on, endpoints.pop() if len(endpoints) == 1 else None, loop)
    fitted = made.profile(result.values, quality(heldout or train, train, floor),
                          made.fitted_notes(result, prior_where, judged_on),
                          made.fitted_front(server.where if measured and REQUEST_OVERHEAD in measured.values else None))
    verdict = decide(heldout, before, keep_fit, regime(cases, fit_m, sched.max_num_seqs),
                     regime(cases, judge_m, sched.max_num_seqs))
    profile = fitted
    if verdict.written == WRITTEN_PRIOR:
        prior_train = judged(space, prior_front, cases, fit_m, settings)
        profile = made.profile(prior_front, quality(before, prior_train, floor),
                               made.prior_notes(prior_where, verdict.why),
                               "the fit's prior, not fitted (calibrate --from-replay kept the prior)", prior.runs,
                               as_prior=True)
    return ReplayFit(profile, result, settings, replays, fitted_on, judged_on, heldout, before, train,
                     floor, floor_from, verdict, per_replay, measured)
