"""How each request's simulated TTFT and TPOT move with each parameter, the schedule held
fixed: a request's TTFT is the sum of the steps that end between its send and its first
token, its TPOT the mean of those up to its last; so its derivative is the sum (mean) of
those steps' derivatives, and a step's is its price's, from its own features. This is the
smooth part of the simulator's response: the jumps (a request joining one step earlier)
are left out, which is what a Jacobian for the fit and for identifiability needs."""
from __future__ import annotations

import numpy as np

from batchlab.calibration.from_replay.predict import NO_FRONT_END, Case, engine_workload
from batchlab.calibration.from_replay.space import ParamSpace
from batchlab.core.config import SchedulerConfig
from batchlab.core.front_end import FrontEnd
from batchlab.core.step_table import distinct_step_features
from batchlab.sim.simulate import simulate

H = 1e-3  # relative step of the per-step derivative (the form is smooth in its parameters)


def step_derivatives(steps: dict[str, np.ndarray], space: ParamSpace,
                     values: dict[str, float]) -> np.ndarray:
    """(steps x parameters): d step time / d log parameter, each distinct step shape
    priced once (a 100,000-request fit repeats a few thousand shapes millions of times)."""
    feats, inverse = distinct_step_features(steps)
    out = np.zeros((len(feats), len(space.names)))
    for k, name in enumerate(space.names):
        up = space.priced({**values, name: values[name] * (1 + H)})
        down = space.priced({**values, name: values[name] * (1 - H)})
        out[:, k] = [(up.step_time(f) - down.step_time(f)) / (2 * H) for f in feats]
    return out[inverse]


def frozen_jacobian(case: Case, sched: SchedulerConfig, space: ParamSpace, values: dict[str, float],
                    front: FrontEnd = NO_FRONT_END) -> tuple[np.ndarray, ...]:
    """(ttft from the send, tpot, d ttft / d log p, d tpot / d log p, serial links) per
    request, schedule held. The front end's own derivatives: d ttft / d log delay = delay,
    d ttft / d log serial = serial x (1 + links) (the caller adds them)."""
    cost = space.priced(values)
    w, links = engine_workload(case, front)
    res = simulate(w, sched, cost, sched.num_kv_blocks, record_steps=True)
    steps, q = res.steps, res.requests
    end = steps["start_s"] + steps["duration_s"]
    order = np.argsort(end, kind="stable")
    end = end[order]
    dstep = step_derivatives({k: v[order] for k, v in steps.items()}, space, values)
    cum = np.vstack([np.zeros(dstep.shape[1]), np.cumsum(dstep, axis=0)])

    def through(t: np.ndarray) -> np.ndarray:  # sum of derivatives of steps ending by t
        return cum[np.searchsorted(end, t + 1e-12, side="right")]

    n, k = len(case), len(space.names)
    ttft, tpot = np.full(n, np.nan), np.full(n, np.nan)
    dttft, dtpot = np.zeros((n, k)), np.zeros((n, k))
    done = q["status"] == "finished"
    ids = q["request_id"][done].astype(np.int64)
    arr, first, fin = q["arrival_s"][done], q["first_token_s"][done], q["finish_s"][done]
    out = q["output_len"][done].astype(float)
    ttft[ids] = first - case.workload.arrival[ids]
    dttft[ids] = through(first) - through(arr)
    multi = out > 1
    den = np.maximum(out - 1, 1)
    tpot[ids] = np.where(multi, (fin - first) / den, np.nan)
    dtpot[ids] = np.where(multi[:, None], (through(fin) - through(first)) / den[:, None], 0.0)
    return ttft, tpot, dttft, dtpot, links
