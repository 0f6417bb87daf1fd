"""Calibration's serving phase: after the sweep, serve a short synthetic workload for real
and refine the sweep's fit to the steps it produced (calibration/fit/served_steps.py refine).

The sweep times shapes one at a time; serving meets them in context. The workload is
made to produce every kind of step a warm sweep cannot: prompt lengths all different
(log-uniform, from a few tokens to the grid's longest chunk), Poisson arrivals at about
half load (so the engine idles, wakes, and overlaps requests of unequal contexts), and
four runs: chunked prefill with a small token budget (chunks of every size down to a
few tokens, beside decodes) and with a budget of 512 (big chunks beside decodes),
continuous batching (whole prompts, then the decode step right after), and continuous
batching of requests arriving BURST at a time with longer replies (runs of steady
decodes of several sequences, of unequal contexts). Its size is priced with the sweep's
fit so the phase takes ~serve_s."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from batchlab.calibration.fit.served_steps import judge_kinds, missing_kinds, predict, refine
from batchlab.calibration.sweep.contention import ContendedCalibration, check_prices, check_served, load_note
from batchlab.calibration.sweep.fresh_process import run_fresh
from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.form import CostForm
from batchlab.core.features import StepFeatures
from batchlab.core.cost.loop_time import busy_gaps, fit_gaps, Overhead
from batchlab.core.step_table import step_features
from batchlab.core.workload import Workload

if TYPE_CHECKING:
    from batchlab.backend.runtime import Runtime

LOAD = 0.5  # offered load: busy about half the time, so idle gaps and overlaps both occur
CHUNK_BUDGET = 64  # chunked prefill's small budget: chunks of every size down to a few tokens
MAX_OUTPUT = 32
MIN_REQUESTS = 12
BIG_CHUNK_BUDGET = 512  # ... and a common serving budget: big chunks beside decodes
BURST, BURST_OUTPUT = 8, 96
# (policy, token budget (None: the policy's default), requests arriving together, longest reply).
# Served runs are mostly big chunks beside decodes and whole long prompts: a phase of
# small chunks only leaves their compute level unfitted, and without bursts decodes of one
# or two sequences fit the steady-decode terms alone; either way served runs then ran
# slower than their price (docs/results/2026-12-01-calibration-serving.md).
POLICIES = (("chunked", CHUNK_BUDGET, 1, MAX_OUTPUT), ("chunked", BIG_CHUNK_BUDGET, 1, MAX_OUTPUT),
            ("continuous", None, 1, MAX_OUTPUT), ("continuous", None, BURST, BURST_OUTPUT))


def workload(model: CostForm, max_prompt: int, seconds: float, seed: int = 0,
             max_context: int | None = None, burst: int = 1, max_output: int = MAX_OUTPUT) -> Workload:
    """About `seconds` of arrivals at LOAD, priced with `model`, `burst` at a time;
    prompt lengths distinct, prompt + output within max_context."""
    rng = np.random.default_rng(seed)
    hi = max(4, min(max_prompt, max_context - max_output) if max_context else max_prompt)
    pool = np.unique(np.round(np.exp(rng.uniform(np.log(2), np.log(hi), 4 * hi))).astype(np.int64))
    rng.shuffle(pool)
    out = rng.integers(1, max_output + 1, len(pool))
    # A sweep fitted on a busy machine can price a step at <= 0 (a negative fitted term):
    # such a fit is refused below (calibration/sweep/contention.py), never floored into a rate
    # (a negative mean once made the arrivals' exponential fail: "scale < 0").
    price = model.step_time
    service = np.array([price(StepFeatures(1, 1, int(p), 0, int(p), int(p) * (int(p) + 1) // 2))
                        + (o - 1) * price(StepFeatures(1, 0, 0, 1, int(p), int(p)))
                        for p, o in zip(pool, out)])
    if not (np.isfinite(service).all() and (service > 0).all()):  # a contaminated sweep's fit
        raise ContendedCalibration(f"the sweep's fit prices {int((~(service > 0)).sum())} of the serving "
                                   f"phase's {len(service)} requests at or below 0 s: a non-physical fit, "
                                   f"its timings contaminated by other work on the machine{load_note()}")
    rate = LOAD / float(service.mean())
    n = int(min(len(pool), max(MIN_REQUESTS, round(rate * seconds))))
    groups = -(-n // burst)  # Poisson arrivals of groups, `burst` requests each
    arrival = np.repeat(np.cumsum(rng.exponential(burst / rate, groups)), burst)[:n]
    return Workload(arrival - arrival[0], pool[:n], out[:n], description=["calibration serving phase"])


Served = list[tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]]


def _serve_all(runtime: Runtime, model: CostForm, max_prompt: int, seconds: float,
               seed: int) -> Served:
    """Per policy (seconds / len(POLICIES) each): its step table, and its busy gaps
    between steps with the next step's sequences (core/cost/loop_time.py)."""
    from batchlab.backend.driver import run_workload  # lazy: torch (workload() is used without it)
    out = []
    for i, (policy, budget, burst, max_output) in enumerate(POLICIES):
        w = workload(model, max_prompt, seconds / len(POLICIES), seed + i, runtime.spec.max_context,
                     burst, max_output)
        cfg = SchedulerConfig(policy=policy, max_num_batched_tokens=budget)
        result = run_workload(runtime, w, cfg, progress=False, seed=seed)
        out.append((result.steps, *busy_gaps(result)))
    return out


def _serve_fresh(args: dict, model: CostForm, max_prompt: int, seconds: float,
                 seed: int) -> Served:
    from batchlab.backend.runtime import Runtime  # lazy: torch
    return _serve_all(Runtime(**args), model, max_prompt, seconds, seed)


def serve(runtime: Runtime, model: CostForm, max_prompt: int, seconds: float,
          seed: int = 0, fresh_process: bool = True, also: CostForm | None = None,
          strict: bool = True) -> tuple[CostForm, dict, Overhead, CostForm | None]:
    """Serve the phase's workload under each policy and refine `model` on every step;
    returns the refined model, what to record in the profile, the serving loop's time
    between steps fitted on the phase's busy gaps, and `also` (the profile's other cost
    form, core/cost/cpu_form.py or core/cost/fitted.py) refined on the same steps (None: none).
    strict: refuse a contended phase (calibration/sweep/contention.py); else its share of
    contended steps is only recorded (info["contended_share"]).

    fresh_process: serve in a new process, as `batchlab run` does. The sweep has just run
    nearly every token count up to the grid's longest chunk in this one, and a count
    run before is cheaper (benchmarks/bench_first_execution.py measures it): served in the
    sweep's process, prefills come out too cheap for served runs
    (docs/results/2026-12-01-calibration-serving.md)."""
    fresh = fresh_process and runtime.args is not None
    served = run_fresh(_serve_fresh, runtime.args, model, max_prompt, seconds, seed) if fresh else None
    if served is None:  # asked for in-process, or the spawned process could not start
        fresh = False
        served = _serve_all(runtime, model, max_prompt, seconds, seed)
    tables = [t for t, _, _ in served]
    steps = {k: np.concatenate([t[k] for t in tables]) for k in tables[0]}
    loop = fit_gaps(np.concatenate([g for _, g, _ in served]), np.concatenate([n for _, _, n in served]))
    feats, y = step_features(steps), steps["duration_s"]
    missing = missing_kinds(feats, ("prefill", "after_prefill", "after_idle"))
    if missing:
        raise RuntimeError(f"the serving phase produced too few steps to fit: {', '.join(missing)}")
    # mostly contended steps: refused where strict (calibrate retries once)
    share = check_served(model, feats, y, refuse=strict)
    refined, levels = refine(model, feats, y)
    check_prices(refined, feats, "the refit on the serving phase")
    other = refine(also, feats, y)[0] if also is not None else None
    if other is not None:
        check_prices(other, feats, "the other form's refit on the serving phase")
    info = {"scale": round(levels.memory, 4), "compute_scale": round(levels.compute, 4),
            "steps": int(y.size), "seconds": round(float(y.sum()), 2), "fresh_process": fresh,
            "contended_share": round(share, 4),
            "loop": loop.as_dict(),
            "policies": [(p if b is None else f"{p} ({b} tokens a step)")
                         + (f", {n} requests at a time" if n > 1 else "") for p, b, n, _ in POLICIES],
            "before": judge_kinds(steps, predict(model, feats)),
            "after": judge_kinds(steps, predict(refined, feats))}
    if other is not None:  # the form that does not price the profile, judged alike
        info["other_form"] = {"before": judge_kinds(steps, predict(also, feats))["all"],
                              "after": judge_kinds(steps, predict(other, feats))["all"]}
    return refined, info, loop, other
