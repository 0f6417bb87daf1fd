"""`batchlab capacity max-rate|replicas`: the highest rate a configuration carries
within SLOs, or the fewest replicas (per model / TP / GPU preset) that carry a load."""
from __future__ import annotations

import argparse

from batchlab.experiments.capacity.options import add_criteria_options, check_samples, criteria_from
from batchlab.experiments.errors import UserError
from batchlab.experiments.executor import add_executor_options
from batchlab.experiments.options import add_common_options, load_experiment
from batchlab.experiments.roofline_options import add_roofline_options

# max-rate's description: what capacity.search.search_max_rate does (not imported here:
# the search machinery loads when the command runs).
MAX_RATE = "Bisection on the rate scale from 1 (the workload as configured)."


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("capacity", help="capacity planning: max-rate | replicas",
                              description=__doc__)
    sub = p.add_subparsers(dest="capacity_command", required=True, parser_class=type(p))
    mr = sub.add_parser("max-rate", help="the highest request rate within the SLOs, with its band",
                        description=MAX_RATE)
    rp = sub.add_parser("replicas", help="the fewest replicas that carry a load within the SLOs")
    for q in (mr, rp):
        add_common_options(q)
        add_roofline_options(q)
        add_criteria_options(q)
        add_executor_options(q)
        q.add_argument("--sensitivity", action="store_true",
                       help="also search with every knob of the price (efficiencies, step overhead, "
                            "all-reduce latency; replicas: the traffic's rate) at each end of its range")
    mr.add_argument("--tolerance", type=float, default=0.02, metavar="F",
                    help="stop when the band is narrower than this share of the rate (default 0.02)")
    rp.add_argument("--candidate", action="append", metavar="MODEL:TP:HARDWARE",
                    help="a configuration to size (repeat or comma-separate); default: the config's")
    rp.add_argument("--max-replicas", type=int, default=256, metavar="N",
                    help="give up above N replicas (default 256)")
    rp.add_argument("--busiest-window", type=float, metavar="S",
                    help="size for the busiest S seconds of the trace (in its own time)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from batchlab.experiments.capacity import report
    from batchlab.experiments.capacity.point import sample_configs
    from batchlab.experiments.capacity.tasks import build_tasks, busiest_window, run_task, setup_or_none
    from batchlab.experiments.executor import make_executor, run_all
    from batchlab.experiments.output import make_out_dir, to_json
    from batchlab.experiments.progress import progress_bar
    from batchlab.experiments.seed_effect import check_seeds_vary
    from batchlab.experiments.setup import CAPACITY_EXPERIMENT, sim_setup

    cfg = load_experiment(args, CAPACITY_EXPERIMENT)
    check_samples(args.seeds, args.windows)
    criteria = criteria_from(cfg.run.slo, args.percentile, args.goodput, args.max_rejected_share)
    if args.sensitivity and cfg.profile.path and args.capacity_command == "max-rate":
        raise UserError("--sensitivity moves the knobs of the price; a --profile has none, and max-rate "
                        "does not vary the traffic's rate (its answer)")
    kind = args.capacity_command
    if kind == "replicas" and args.busiest_window is not None:
        cfg = busiest_window(cfg, args.busiest_window)
    samples = sample_configs(cfg.workload, args.seeds, args.windows)
    seeds_vary = check_seeds_vary(cfg.workload, args.seeds, "--windows W")
    if kind == "max-rate" and not 0 < args.tolerance < 1:
        raise UserError(f"--tolerance must be in (0, 1), got {args.tolerance}")
    if kind == "replicas" and args.max_replicas < 1:
        raise UserError(f"--max-replicas must be >= 1, got {args.max_replicas}")
    tasks = build_tasks(kind, cfg, criteria, samples,
                        args.tolerance if kind == "max-rate" else args.max_replicas,
                        getattr(args, "candidate", None), args.sensitivity)
    for t in tasks:  # every configuration is checked before anything runs
        try:
            sim_setup(t[2])
        except UserError as e:
            if "leaves no KV memory" not in str(e):
                raise  # a model that does not fit is an answer (a row), not an error
    out = make_out_dir(args.out, cfg.model_dump()) if args.out else None
    with make_executor(args.workers, args.dask) as (ex, where), \
            progress_bar(total=len(tasks), desc=kind, unit="search", leave=False) as bar:
        answers = run_all(ex, run_task, tasks, lambda i, a: bar.update())
    main = [a for t, a in zip(tasks, answers) if t[0] is None]
    sens = [(t[0], a) for t, a in zip(tasks, answers) if t[0] is not None]
    setups = {a.label: setup_or_none(t[2]) for t, a in zip(tasks, answers) if t[0] is None}
    text = report.render(kind, main, sens, criteria, cfg, setups, samples, args.gpu_hour_price, where,
                         seeds_vary)
    if out:
        files = report.write(out, main, sens, criteria, cfg, args.gpu_hour_price)
        (out / "capacity.json").write_text(to_json(report.as_json(main, sens, args.gpu_hour_price, criteria)) + "\n")
        text += f"\nresults written to {out}/ ({', '.join(files)})"
    if args.format == "json":
        print(to_json(report.as_json(main, sens, args.gpu_hour_price, criteria)))
    else:
        print(text)
    return 0 if any(a.value is not None for a in main) else 1
