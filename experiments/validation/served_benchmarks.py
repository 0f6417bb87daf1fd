"""`batchlab validate --served-benchmarks FILE`: every configuration of a served-engine
benchmark table (calibration/served_bench/) simulated as the default prediction prices it
(the model preset on the GPU preset, vLLM's scheduler defaults), its mean TTFT and TPOT
set beside the measured ones, by row, by (model, GPU, TP) group and along the load curves."""
from __future__ import annotations

import sys
from pathlib import Path

from batchlab import sim
from batchlab.calibration.served_bench.client import CLIENT_WORDS, ROUNDS, benchmark_front_end, benchmark_workload
from batchlab.calibration.served_bench.fit import Priced
from batchlab.calibration.served_bench.floor import Floor, prefill_floor
from batchlab.calibration.served_bench.judge import Judgement, Predicted, Spread, judge, sides_the_rows_fix
from batchlab.calibration.served_bench.read import BenchmarkRow
from batchlab.calibration.served_bench.recorded import RecordedRow, record
from batchlab.core.cost.served.formats import weight_formats
from batchlab.core.cost.served.host import ASYNC_BY_DEFAULT_FROM, async_by_default
from batchlab.core.cost.served.profile import ServedProfile
from batchlab.core.model.hardware import HARDWARE
from batchlab.core.model.presets import lookup_model
from batchlab.core.model.spec import ModelSpec
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.setup import SimSetup, sim_setup
from batchlab.experiments.setup.dtypes import served_model


def config_for(row: BenchmarkRow, served: str = "vllm") -> ExperimentConfig:
    """The row's deployment; served: the served-engine terms on its GPU profile (vllm: the
    shipped ones, none: the kernels' sum, or a served profile file)."""
    model = {"name": row.model, **({"dtype": row.dtype} if row.dtype else {})}
    return ExperimentConfig.model_validate({"model": model, "scheduler": {"policy": "chunked"},
                                            "hardware": {"name": row.gpu, "tensor_parallel": row.tp,
                                                         "served_engine": served}})


def row_model(cfg: ExperimentConfig) -> ModelSpec:
    """The model as the row's deployment serves it (its weights' dtype applied)."""
    return served_model(cfg, lookup_model(cfg.model.name))[0]


def priced(row: BenchmarkRow, setup: SimSetup) -> Priced:
    """What the served-engine terms apply to: the row's GPU cost and engine settings."""
    scheduler = next(iter(setup.schedulers.values()))
    formats = weight_formats(row_model(config_for(row)))
    return Priced(setup.cost, scheduler.max_num_seqs, row.gpu, HARDWARE[row.gpu].nvlink, formats)


def recorded_rows(rows: list[BenchmarkRow], progress: bool = True) -> tuple[list[RecordedRow], list[Priced]]:
    """Each row simulated once at its operator-fitted price, the kernels' sum (calibrate
    --from-served prices its steps again as the served engine runs them)."""
    recs, prices = [], []
    for i, row in enumerate(rows):
        if progress:
            print(f"\r{i + 1}/{len(rows)} configurations recorded", end="", file=sys.stderr, flush=True)
        setup = sim_setup(config_for(row, "none"))
        recs.append(record(row, setup.cost, next(iter(setup.schedulers.values())), setup.blocks))
        prices.append(priced(row, setup))
    if progress:
        print(file=sys.stderr)
    return recs, prices


def predict(row: BenchmarkRow, client: str, served: str = "vllm") -> Predicted:
    """The row's mean TTFT and TPOT as simulated under the client model (client.py; the
    staggered one spreads its users' first sends over a lockstep run's mean latency).
    served: as config_for's. An engine that schedules asynchronously by default (the row's
    version: core/cost/served/host.py) takes a request reaching it busy a step later."""
    setup = sim_setup(config_for(row, served))
    scheduler = next(iter(setup.schedulers.values()))
    cost = setup.cost
    lag = async_by_default(row.engine_version)

    def run(workload):
        result = sim.simulate(workload, scheduler, cost, setup.blocks, record_steps=False,
                              front_end=benchmark_front_end(row, client), async_scheduling=lag)
        return result.summary()
    if client == "staggered":
        lockstep = sim.simulate(benchmark_workload(row, "lockstep"), scheduler, cost, setup.blocks,
                                record_steps=False, async_scheduling=lag).summary()
        s = run(benchmark_workload(row, client, latency_s=lockstep["mean_e2el_ms"] / 1e3))
    else:
        s = run(benchmark_workload(row, client))
    return Predicted(row, s["mean_ttft_ms"] / 1e3, s["mean_tpot_ms"] / 1e3)


def floors(rows: list[BenchmarkRow], served: str = "vllm") -> list[Floor]:
    """Each row's prefill floor (calibration/served_bench/floor.py) on its GPUs, the
    all-reduce as `served` prices it (the kernels' sum: NCCL's table)."""
    out = []
    for row in rows:
        cfg = config_for(row, served)
        cost = sim_setup(cfg).cost
        allreduce = getattr(cost, "graph", cost).allreduce  # a served engine's decode form: its all-reduce
        out.append(prefill_floor(row, row_model(cfg), HARDWARE[row.gpu], allreduce))
    return out


def fold_profiles(profile: ServedProfile, models: set[str], directory: Path) -> dict[str, str]:
    """Per model: a served profile file in `directory` holding the terms of `profile`'s fold
    fitted without that model (calibrate --from-served --leave-out model). ValueError naming
    a model no fold left out."""
    folds = {h.left_out: h for h in profile.heldout if h.by == "model"}
    missing = sorted(models - set(folds))
    if missing:
        raise ValueError(f"the served profile holds no fold fitted without {missing[0]} "
                         f"(calibrate --from-served FILE --leave-out model writes one per model)")
    out = {}
    for model in sorted(models):
        path = directory / f"without-{model}.json"
        profile.model_copy(update={"terms": folds[model].terms, "heldout": [],
                                   "fitted_on": f"{profile.fitted_on}, less {model}'s rows"}).save(path)
        out[model] = str(path)
    return out


def judge_rows(rows: list[BenchmarkRow], client: str, progress: bool = True, served: str = "vllm",
               by_model: dict[str, str] | None = None) -> Judgement:
    """by_model: a served profile per model (fold_profiles), in place of `served`."""
    out = []
    for i, row in enumerate(rows):
        if progress:
            print(f"\r{i + 1}/{len(rows)} configurations simulated", end="", file=sys.stderr, flush=True)
        out.append(predict(row, client, by_model[row.model] if by_model else served))
    if progress:
        print(file=sys.stderr)
    return judge(out)


def _pct(x: float) -> str:
    return f"{x:+.0%}"


def _spread_line(name: str, tpot: Spread, ttft: Spread) -> str:
    """A line of the group table: rows, then TPOT's and TTFT's |error| median, p90 and share slow."""
    return (f"  {name:<34}{tpot.n:>5}{tpot.median:>12.0%}{tpot.p90:>7.0%}{tpot.slow_share:>6.0%}"
            f"{ttft.median:>12.0%}{ttft.p90:>7.0%}{ttft.slow_share:>6.0%}")


def below_floor_line(below: list[Floor], then: str = "they ran less than they state") -> str:
    """One line naming the rows that ran faster than their stated prefills allow (empty: none)."""
    if not below:
        return ""
    named = "; ".join(f"{f.row.model} on {f.row.tp} x {f.row.gpu}, {f.row.concurrency} users, "
                      f"{f.row.isl}/{f.row.osl}: {f.cycle_s * 1e3:.0f} < {f.floor_s * 1e3:.0f} ms"
                      for f in below)
    return (f"{len(below)} configurations ran a user's cycle (TTFT + (osl - 1) x TPOT) faster than their GPUs "
            f"can prefill the stated prompts (GEMMs at the datasheet's peak, the engine's all-reduce, "
            f"calibration/served_bench/floor.py): {then}; {named}")


def _fixed_sides(j: Judgement, below: list[Floor]) -> list[str]:
    """The line naming the groups whose side no price could change (empty: none)."""
    fixed = sides_the_rows_fix(j, {f.row for f in below})
    if not fixed:
        return []
    named = "; ".join(f"{g.group[0]}, {g.group[1]}, TP {g.group[2]} ({why})" for g, why in fixed)
    return [f"  {len(fixed)} groups one-sided by their rows, whatever the price: {named}"]


def _below_floor(j: Judgement, below: list[Floor]) -> list[str]:
    """The rows that ran faster than their stated prefills allow, and the judgement without them."""
    if not below:
        return []
    out = [f"  {below_floor_line(below)}"]
    ran_less = {f.row for f in below}
    kept = [p for p in j.rows if p.row not in ran_less]
    if kept:
        tpot, ttft = Spread.of([p.tpot_error for p in kept]), Spread.of([p.ttft_error for p in kept])
        out.append(_spread_line("all but those", tpot, ttft))
    return out


def render(j: Judgement, client: str, rows: bool = False, priced_by: str = "", set_apart: str = "",
           below: list[Floor] | None = None) -> str:
    lines = [f"client model: {client} ({CLIENT_WORDS[client]}; {ROUNDS} requests a user; "
             f"calibration/served_bench/client.py); prices: "
             f"{priced_by or 'the defaults'} (each model preset on its GPU preset, vLLM's scheduler defaults)",
             *([set_apart] if set_apart else [])]
    lagged = sum(async_by_default(p.row.engine_version) for p in j.rows)
    if lagged:
        lines.append(f"async scheduling on {lagged} of {len(j.rows)} configurations (vLLM >= "
                     f"{'.'.join(map(str, ASYNC_BY_DEFAULT_FROM))} by their version, its default): a request "
                     f"reaching the engine busy joins a step later (sim/admission.py)")
    if rows:
        lines.append(f"  {'configuration':<58}{'TTFT ms':>9}{'sim':>9}{'err':>7}{'TPOT ms':>9}{'sim':>8}{'err':>7}")
        for p in j.rows:
            r = p.row
            lines.append(f"  {r.describe():<58}{r.ttft_s * 1e3:9.1f}{p.ttft_s * 1e3:9.1f}{_pct(p.ttft_error):>7}"
                         f"{r.tpot_s * 1e3:9.2f}{p.tpot_s * 1e3:8.2f}{_pct(p.tpot_error):>7}")
    lines.append(f"  {'group (model, GPU, TP)':<34}{'rows':>5}{'TPOT |err|':>12}{'p90':>7}{'slow':>6}"
                 f"{'TTFT |err|':>12}{'p90':>7}{'slow':>6}")
    for g in j.groups:
        flag = "  one-sided" if g.one_sided else ""
        name = f"{g.group[0]}, {g.group[1]}, TP {g.group[2]}"
        lines.append(_spread_line(name, g.tpot, g.ttft) + flag)
    lines.append(_spread_line("all", j.tpot, j.ttft))
    lines += _below_floor(j, below or [])  # and the judgement without them, under the table's total
    lines += _fixed_sides(j, below or [])
    if j.answers:
        objectives = sorted({a.objective_ms for a in j.answers})
        lines.append(f"load curves: the highest concurrency meeting a TPOT objective "
                     f"({', '.join(f'{o:g}' for o in objectives)} ms), "
                     f"{len(j.answers)} answers: the same as measured {j.answer_share(0):.0%}, "
                     f"within one measured step {j.answer_share(1):.0%}")
        lines.append("  the same by objective: " + ", ".join(f"{o:g} ms {j.answer_share(0, o):.0%}" for o in objectives)
                     + f"; of the {sum(a.binds for a in j.answers)} whose objective the measured curve crosses "
                     f"(not met at its top): the same {j.answer_share(0, binding=True):.0%}, within one step "
                     f"{j.answer_share(1, binding=True):.0%}")
    return "\n".join(lines)
