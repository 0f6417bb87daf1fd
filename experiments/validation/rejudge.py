"""`batchlab validate --real DIR ... --profile P`: judge a profile on real runs stored by
earlier validations, without serving again (seconds, not minutes). Each stored policy's
identical request list is simulated with the profile (the real runs' scheduler settings
and KV pool), and once more at each real run's machine speed as this profile prices its
steps; the errors, spread and verdicts are those of `validate --repeats`
(experiments/validation/repeats.py), over the stored summaries. What a stored run does
not keep (which request ran in which step, every inter-token gap) is not re-judged: no
step matching, no distribution tests."""
from __future__ import annotations

import itertools
from pathlib import Path

from batchlab.core.cost import CostModel
from batchlab.core.cost_at_speed import CostAtSpeed
from batchlab.core.loop_time import Overhead
from batchlab.core.run_meta import MachineSpeed
from batchlab.experiments.machine_speed import machine_speed
from batchlab.experiments.run_labels import stability
from batchlab.experiments.validation.compare import STAT_TARGET, THROUGHPUT_TARGET
from batchlab.experiments.validation.numbers import pct
from batchlab.experiments.validation.pair import run_sim
from batchlab.experiments.validation.per_step import per_step
from batchlab.experiments.validation.repeats import faster, summary_rows, verdict_counts, within
from batchlab.experiments.validation.repeats_text import speeds
from batchlab.experiments.validation.stored import StoredCell
from batchlab.experiments.validation.variants import normalised_cost


def run_speeds(cells: list[StoredCell], cost: CostModel, source: str) -> list[list[MachineSpeed]]:
    """Each stored run's machine speed (experiments/machine_speed.py) as `cost` prices its steps."""
    return [[machine_speed(r.steps, cost, source) for r in c.reals] for c in cells]


def rejudge(cell: StoredCell, cost: CostModel, loop: Overhead | None, speeds: list[MachineSpeed]) -> dict:
    """One stored policy judged against `cost` (a profile's step prices) plus `loop` (its
    time between steps); speeds: its runs' run_speeds."""
    sim = run_sim(cell.workload, cell.scheduler, CostAtSpeed(cost, loop=loop), {"cost_model": "profile"})
    normalised = [run_sim(cell.workload, cell.scheduler, normalised_cost(cost, s, loop)).result.summary()
                  for s in speeds]
    real_verdicts = [(r.summary.get("stability") or (r.meta.stability and r.meta.stability.verdict))
                     for r in cell.reals]
    sim_verdict = stability(sim.result).verdict
    flagged = sim_verdict == "overloaded" or "overloaded" in real_verdicts
    rows = summary_rows([r.summary for r in cell.reals], sim.result.summary(), normalised, flagged)
    return {"where": str(cell.where), "policy": cell.scheduler.policy, "runs": len(cell.reals),
            "stability": {"real": real_verdicts, "sim": sim_verdict},
            "machine_speed": [{"factor": s.factor, "compute_factor": s.compute_factor} for s in speeds],
            "metrics": rows, "totals": totals([{"metrics": rows}])}


def step_test(cells: list[StoredCell], cost: CostModel, speeds: list[list[MachineSpeed]]) -> dict:
    """Issue 14's per-step test (experiments/validation/per_step.py) on the stored runs,
    with the spread between validations of the same work where there are several."""
    return per_step([list(zip((r.steps for r in c.reals), s)) for c, s in zip(cells, speeds)], cost,
                    same_work_apart(cells))


def same_work_apart(cells: list[StoredCell]) -> list[tuple[dict, dict]]:
    """The first real runs of every two stored validations (each directory once) that
    served the identical request list with the same scheduler settings."""
    groups: dict[tuple, dict[Path, dict]] = {}
    for c in cells:
        w = c.workload
        key = (w.arrival.tobytes(), w.prompt_len.tobytes(), w.output_len.tobytes(), w.max_concurrency,
               w.think_time_s, c.scheduler.model_dump_json())
        groups.setdefault(key, {}).setdefault(c.where.resolve(), c.reals[0].steps)
    return [pair for g in groups.values() for pair in itertools.combinations(g.values(), 2)]


def totals(cells: list[dict]) -> dict:
    """Over the cells' metric rows, as the fidelity study's report counts them: within
    target raw and normalised, how many latency numbers the simulation predicts faster,
    and the verdicts."""
    rows = [m for c in cells for m in c["metrics"]]
    (w, n), (wn, nn) = within(rows, "error", "verdict"), within(rows, "error_normalised", "verdict_normalised")
    (f, lat), (fn, latn) = faster(rows, "error"), faster(rows, "error_normalised")
    return {"within": w, "judged": n, "within_normalised": wn, "judged_normalised": nn,
            "faster": f, "latency": lat, "faster_normalised": fn, "latency_normalised": latn,
            "verdicts": verdict_counts(rows), "verdicts_normalised": verdict_counts(rows, "verdict_normalised")}


def render_cell(c: dict) -> str:
    ms = c["machine_speed"]
    per_run = speeds([s["factor"] for s in ms], [s["compute_factor"] for s in ms], 2)
    lines = [f"[{c['policy']}] {c['where']}: {c['runs']} real run(s) ({', '.join(map(str, c['stability']['real']))}; "
             f"sim {c['stability']['sim']}); machine speed (memory/compute) per run: {per_run}",
             f"{'metric':<22}{'real (median)':>14}{'spread':>9}{'sim':>11}{'error':>9}{'normalised':>12}  verdict"]
    for m in c["metrics"]:
        if m["target"] is None:
            continue
        label = m["metric"] if m["stat"] == "value" else f"{m['metric']} {m['stat']}"
        lines.append(f"{label:<22}{m['spread']['median']:>14.2f}{pct(m['spread']['range'], False):>9}"
                     f"{m['sim']:>11.2f}{pct(m['error']):>9}{pct(m['error_normalised']):>12}  "
                     f"{m['verdict']} / {m['verdict_normalised']}")
    return "\n".join(lines)


def render_totals(t: dict, cells: int, dirs: int) -> str:
    v, vn = t["verdicts"], t["verdicts_normalised"]
    return (f"over {cells} policies of {dirs} stored validation(s): within target raw {t['within']}/{t['judged']}, "
            f"normalised {t['within_normalised']}/{t['judged_normalised']}; the simulation faster in "
            f"{t['faster']} of {t['latency']} latency numbers (normalised {t['faster_normalised']} of "
            f"{t['latency_normalised']}); verdicts raw "
            f"{v['ok']} ok, {v['miss']} miss, {v['undecidable']} undecidable, {v['overloaded']} overloaded; "
            f"normalised {vn['ok']} ok, {vn['miss']} miss (targets: "
            + ", ".join(f"{k} {t * 100:g}%" for k, t in STAT_TARGET.items())
            + f", throughput {THROUGHPUT_TARGET * 100:g}%)")
