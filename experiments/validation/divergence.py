"""Why a simulated run differs from the real one: where the two schedules first part,
and what ran there in each.

Both runs use the same deterministic scheduler on the same requests, so while the steps
coincide the scheduler state is identical except for the clock. A divergence therefore
starts with time: an arrival visible to one run's decision and not yet to the other's
(the step boundaries have drifted apart by the accumulated step-time error), or, in a
static scheduler, a batch-delay deadline falling on either side of a boundary."""
from __future__ import annotations

from typing import Hashable

from batchlab.core.result import RunResult
from batchlab.experiments.validation.records import Divergence


def _is_composition(key: Hashable) -> bool:
    return isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], tuple)


def _describe_batch(key: Hashable) -> str:
    if not _is_composition(key):
        return str(key)
    run, pre = key
    parts = [f"{rid}:{n}" for rid, _, n in run]  # request id : tokens this step
    text = "{" + ", ".join(parts[:8]) + (f", ... {len(parts) - 8} more" if len(parts) > 8 else "") + "}"
    return text + (f" preempting {list(pre)}" if pre else "")


def explain(real: RunResult, sim: RunResult, real_keys: list[Hashable],
            sim_keys: list[Hashable], first: int | None) -> Divergence:
    """The first divergence, described: step index, both step start times, what ran in
    each, the arrivals that fell between the two step boundaries, and a one-line reason."""
    if first is None:
        return Divergence(step=None, reason="the schedules coincide step for step")
    n_r, n_s = len(real_keys), len(sim_keys)
    if first >= min(n_r, n_s):
        short, long_ = ("real", "sim") if n_r < n_s else ("sim", "real")
        return Divergence(step=first, reason=f"identical for {first} steps, then the {short} run ended; "
                                             f"the {long_} run took {abs(n_r - n_s)} more")
    t_r = float(real.steps["start_s"][first])
    t_s = float(sim.steps["start_s"][first])
    lo, hi = min(t_r, t_s), max(t_r, t_s)
    arr = real.requests["arrival_s"]
    between = real.requests["request_id"][(arr > lo) & (arr <= hi)]
    kr, ks = real_keys[first], sim_keys[first]
    out = {"step": first, "real_start_s": t_r, "sim_start_s": t_s, "clock_drift_s": t_r - t_s,
           "real_batch": _describe_batch(kr), "sim_batch": _describe_batch(ks),
           "arrivals_between": [int(i) for i in between]}
    drift = (f"by step {first} the real steps ran {abs(t_r - t_s) * 1e3:.1f} ms "
             f"{'later' if t_r > t_s else 'earlier'} than the simulated ones (accumulated "
             f"step-time error)")
    if _is_composition(kr) and _is_composition(ks):
        ids_r = {rid for rid, _, _ in kr[0]}
        ids_s = {rid for rid, _, _ in ks[0]}
        out["only_real"] = sorted(ids_r - ids_s)
        out["only_sim"] = sorted(ids_s - ids_r)
        joined = [int(i) for i in between if int(i) in ids_r ^ ids_s]
        if joined:
            who = ", ".join(f"request {i} (arrival {arr[real.requests['request_id'] == i][0]:.4f} s)"
                            for i in joined[:3])
            later = "sim" if t_s > t_r else "real"
            out["reason"] = (f"{who} arrived between the two runs' step boundaries (real step at "
                             f"{t_r:.4f} s, sim at {t_s:.4f} s): only the {later} step saw it; {drift}")
            return Divergence(**out)
        if kr[1] != ks[1]:
            out["reason"] = f"preemption differs: real {list(kr[1])}, sim {list(ks[1])}; {drift}"
            return Divergence(**out)
    out["reason"] = (f"the batches differ (real {out['real_batch']}, sim {out['sim_batch']}); {drift}"
                     + (f"; arrivals in between: {out['arrivals_between'][:5]}" if between.size else ""))
    return Divergence(**out)

