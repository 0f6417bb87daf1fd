"""`batchlab capacity deploy`: the options read, the space stated up front, the search
run with its progress shown, the answer printed and written."""
from __future__ import annotations

import argparse
import math
import re
import sys

from batchlab.core import atomic
from batchlab.core.model.presets import lookup_hardware, lookup_model
from batchlab.experiments.capacity import deploy_report
from batchlab.experiments.capacity import tasks as searches  # run_task read when called: tests patch it
from batchlab.experiments.capacity.deploy import check_prices, ranked, runner_up, search_deployments
from batchlab.experiments.capacity.options import check_samples, criteria_from
from batchlab.experiments.capacity.pd_options import check_pd_options, run_pd
from batchlab.experiments.capacity.point import sample_configs
from batchlab.experiments.capacity.space import DeploySpace, parse_list
from batchlab.experiments.capacity.tier_options import parse_tier_options
from batchlab.experiments.capacity.reproduce import simulate_command, window_line
from batchlab.experiments.capacity.tasks import build_tasks, busiest_window, setup_or_none
from batchlab.experiments.errors import UserError
from batchlab.experiments.executor import make_executor, run_all
from batchlab.experiments.options import load_experiment
from batchlab.experiments.output import make_out_dir, to_json
from batchlab.experiments.progress import progress_bar
from batchlab.experiments.seed_effect import check_seeds_vary
from batchlab.experiments.setup import CAPACITY_EXPERIMENT
from batchlab.experiments.setup.gpu import roofline_because
from batchlab.sim.router import ROUTERS


def read_prices(items: list[str] | None) -> dict[str, float] | None:
    if not items:
        return None
    out = {}
    for item in items:
        gpu, _, usd = item.partition("=")
        try:
            v = float(usd)
        except ValueError:
            v = math.nan
        if not gpu or not (v > 0 and math.isfinite(v)):
            raise UserError(f"--price {item!r}: expected GPU=USD_PER_GPU_HOUR, e.g. h100-sxm=2.5")
        out[gpu.strip()] = v
    return out


def speculation_options(cfg, text: str | None) -> list[str]:
    """--speculative-options off,1,3: speculation off, or the config's method at each k
    (default: the config's alone). One line naming the option where it cannot be."""
    sp = cfg.speculative
    if text is None:
        return [f"{sp.method}:{sp.num_speculative_tokens}" if sp.on else ""]
    out = []
    for item in parse_list(text, "--speculative-options"):
        if item == "off":
            out.append("off")
        elif item.isdigit() and int(item) >= 1 and sp.on:
            out.append(f"{sp.method}:{int(item)}")
        else:
            raise UserError(f"--speculative-options: {item!r}: expected off or a draft length >= 1"
                            + ("" if sp.on else " with --speculative METHOD and its --acceptance"))
    return out


def run_deploy(args: argparse.Namespace) -> int:
    cfg = load_experiment(args, CAPACITY_EXPERIMENT)
    check_samples(args.seeds, args.windows)
    criteria = criteria_from(cfg.run.slo, args.percentile, args.goodput, args.max_rejected_share,
                             args.count_too_long)
    if args.max_replicas < 1:
        raise UserError(f"--max-replicas must be >= 1, got {args.max_replicas}")
    if args.busiest_window is not None:
        cfg = busiest_window(cfg, args.busiest_window)
    if cfg.profile.path:
        raise UserError("capacity deploy prices GPU presets (their GPU profiles, or the roofline); a "
                        "--profile prices one measured device (use capacity replicas)")
    space = DeploySpace(models=parse_list(_given(args.models, cfg.model.name), "--models"),
                        gpus=parse_list(_given(args.gpus, cfg.hardware.name), "--gpus"),
                        tp=parse_list(args.tp_options, "--tp-options", int),
                        dtypes=parse_list(args.dtype_options, "--dtype-options"),
                        seats=parse_list(args.seats_options, "--seats-options", int),
                        budgets=parse_list(args.budget_options, "--budget-options", int),
                        pp=parse_list(args.pp_options, "--pp-options", int),
                        ep=parse_list(args.ep_options, "--ep-options"),
                        routers=parse_list(args.router_options, "--router-options") if args.router_options
                        is not None else [""],
                        speculative=speculation_options(cfg, args.speculative_options),
                        kv_tiers=parse_tier_options(args.kv_tier_options))
    bad_router = [r for r in space.routers if r and r not in ROUTERS]
    if bad_router:
        raise UserError(f"--router-options: {bad_router[0]!r} is not one of {', '.join(ROUTERS)}")
    bad_ep = [e for e in space.ep if e not in ("off", "on")]
    if bad_ep:
        raise UserError(f"--ep-options: {bad_ep[0]!r} is not one of off, on")
    bad = [d for d in space.dtypes if d not in ("bf16", "fp16", "fp8")]
    if bad:
        raise UserError(f"--dtype-options: {bad[0]!r} is not one of bf16, fp16, fp8")
    for m in space.models:
        _known(lookup_model, m, "--models")
    for g in space.gpus:
        _known(lookup_hardware, g, "--gpus")
    prices = read_prices(args.price)
    check_prices(space, prices)
    pd_search = check_pd_options(args)  # disaggregated pools (--pd-ratios): searched after the rest
    if pd_search and prices is not None:
        raise UserError("--pd-ratios with --price: the disaggregated search ranks by GPUs only")
    samples = sample_configs(cfg.workload, args.seeds, args.windows)
    seeds_vary = check_seeds_vary(cfg.workload, args.seeds, "--windows W")
    n = len(samples)
    header = [f"capacity deploy: {criteria.describe()}",
              (f"workload: {cfg.workload.source} (rate x{cfg.workload.rate_scale:g}), {n} sample(s) per point"
               + (f" ({seeds_vary})" if seeds_vary else "")
               + (f"; router {cfg.run.router}" if space.routers == [""] else "; routers searched") + "; policy "
               f"{cfg.policies()[0]}"),
              (f"search space: {space.describe()}; each sized to its fewest replicas (up to "
               f"{args.max_replicas}), cheapest per replica first, none searched beyond the runner-up's cost"),
              ("objective: " + ("GPUs" if prices is None else "cost per hour at " + ", ".join(
                  f"{g} ${p:g}/GPU-hour" for g, p in prices.items()))),
              pricing_line(cfg), sized := window_line(cfg, args.busiest_window)]
    print("\n".join(header[:4]), file=sys.stderr)
    out = make_out_dir(args.out, cfg.model_dump()) if args.out else None
    done = [0]

    def report_done(o) -> None:
        done[0] += 1
        what = (f"{o.replicas} replica(s)" if o.replicas is not None else o.why_none())
        print(f"[{done[0]}/{space.size()}] {o.dep.label()}: {what}", file=sys.stderr)
        bar.update()

    with make_executor(args.workers, args.dask) as (ex, where), \
            progress_bar(total=space.size(), desc="deploy", unit="deployment", leave=False) as bar:
        width = 1 if where.startswith("serial") else max(1, _width(where))
        options = search_deployments(cfg, criteria, samples, space, prices, args.max_replicas, ex, width,
                                     report_done)
        sens = {}
        if args.sensitivity:
            best = ranked(options, criteria)
            for o in [o for o in (best[0] if best else None, runner_up(best)) if o is not None]:
                tasks = build_tasks("replicas", o.cfg, criteria, samples, args.max_replicas, None, True)[1:]
                answers = run_all(ex, searches.run_task, tasks)
                sens[o.dep.label()] = (o.answer, list(zip([t[0] for t in tasks], answers)))
        pd_lines, pd_json = run_pd(args, cfg, criteria, samples, space, options, pd_search, ex) if pd_search else ([], None)
    header.append(f"ran on {where}")

    def more(o) -> list[str]:  # under the winner and the runner-up
        again = simulate_command(args, cfg, o.dep, o.replicas, args.busiest_window is not None)
        if n > 1:  # the row is a mean over the samples; the command reruns the workload as given
            again += f"  # its row: the mean over {n} samples (--seeds, --windows)"
        return [f"priced by: {priced_by(o)}", f"reproduce: {again}"]

    text = deploy_report.render(options, criteria, header, prices, sens, more)
    if pd_lines:
        text += "\n" + "\n".join(pd_lines)
    if out:
        files = deploy_report.write(out, options, prices, sens, criteria)
        summary = {"options": [deploy_report.option_row(o, prices, criteria) for o in options],
                   **({"disaggregated": pd_json} if pd_json is not None else {})}
        atomic.write_text(out / "deploy.json", to_json(summary) + "\n")
        text += f"\nresults written to {out}/ ({', '.join(files + ['deploy.json'])})"
    if args.format == "json":
        best = ranked(options, criteria)
        shown = [o for o in (best[0] if best else None, runner_up(best)) if o is not None]
        print(to_json({"options": [deploy_report.option_row(o, prices, criteria) for o in options],
                       "winner": _label(best, 0),
                       "runner_up": (r.dep.label() if (r := runner_up(best)) else None),
                       "sized_for": sized.removeprefix("sized for: "),
                       "reproduce": {o.dep.label(): more(o)[1].removeprefix("reproduce: ") for o in shown},
                       **({"disaggregated": pd_json} if pd_json is not None else {})}))
    else:
        print(text)
    found = ranked(options, criteria) or (pd_json or {}).get("disaggregated_winner")
    return 0 if found else 1


def _given(value: str | None, default: str) -> str:
    """A list option's text, or the config's value where the option was not given (an
    empty one given is an error of parse_list, not the default)."""
    return default if value is None else value


def priced_by(o) -> str:
    """What priced this option's answer: its setup's first assumption (a GPU profile and
    where it came from, or the roofline at its constants), as points.csv's cost_model."""
    setup = setup_or_none(o.cfg)
    if setup is None:
        return (o.answer.best or {}).get("cost_model") or "unknown"
    return setup.assumptions()[0].removeprefix("assumptions: ")


def _known(lookup, name: str, option: str) -> None:
    try:
        lookup(name)
    except ValueError as e:
        raise UserError(f"{option}: {e}") from None


def _label(best: list, i: int) -> str | None:
    return best[i].dep.label() if len(best) > i else None


def _width(where: str) -> int:
    """Workers of the executor, from its description ('process pool (2 workers)', 'Dask
    cluster at tcp://10.0.0.1:8786 (4 workers)'); 1 where it names none."""
    m = re.search(r"\((\d+) workers?\)", where)
    return int(m.group(1)) if m else 1


def pricing_line(cfg) -> str:
    """How the deployments are priced: each GPU's GPU profile (fitted on measured operator
    tables; a GPU without its own, the nearest one's scaled by datasheet ratios) unless
    the roofline was asked for or its constants given; each answer names its own."""
    h = cfg.hardware
    roof = (f"the roofline at {h.mem_efficiency:.0%} of datasheet memory bandwidth, "
            f"{h.compute_efficiency:.0%} of FLOP/s, step overhead {h.step_overhead_s * 1e3:g} ms")
    if roofline_because(cfg):
        return f"pricing: {roof} (--sensitivity moves each)"
    return ("pricing: each GPU's GPU profile (fitted on measured operators; a GPU without tables: the "
            "nearest one's, scaled), dense and MoE alike; each answer's 'priced by' and points.csv's "
            "cost_model say which (--sensitivity moves its constants)")
