"""`batchlab capacity max-rate|replicas`: the highest rate a configuration carries
within SLOs, or the fewest replicas (per model / TP / GPU preset) that carry a load."""
from __future__ import annotations

import argparse
import sys

import numpy as np
from tqdm import tqdm

from batchlab.core.workload import build_workload
from batchlab.experiments.capacity import report
from batchlab.experiments.capacity.options import add_criteria_options, check_samples, criteria_from
from batchlab.experiments.capacity.point import sample_configs
from batchlab.experiments.capacity.search import Answer, search_max_rate, search_replicas
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.executor import add_executor_options, make_executor, run_all
from batchlab.experiments.options import add_common_options, load_experiment
from batchlab.experiments.output import make_out_dir, to_json
from batchlab.experiments.roofline_options import add_roofline_options
from batchlab.experiments.sim_setup import sim_setup

DEFAULT_EXPERIMENT = {
    "workload": {"source": "chat", "num_requests": 1000, "rate": 14.0},
    "model": {"name": "llama-3-8b"},
    "hardware": {"name": "a100-80gb"},
    "scheduler": {"policy": "chunked"},
}
# Each efficiency (and the step overhead) at -25% and +25%; efficiencies capped at 1.
SENSITIVITY = [(f, k) for f in ("mem_efficiency", "compute_efficiency", "step_overhead_s")
               for k in (0.75, 1.25)]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("capacity", help="capacity planning: max-rate | replicas",
                              description=__doc__)
    sub = p.add_subparsers(dest="capacity_command", required=True, parser_class=type(p))
    mr = sub.add_parser("max-rate", help="the highest request rate within the SLOs, with its band",
                        description=search_max_rate.__doc__)
    rp = sub.add_parser("replicas", help="the fewest replicas that carry a load within the SLOs")
    for q in (mr, rp):
        add_common_options(q)
        add_roofline_options(q)
        add_criteria_options(q)
        add_executor_options(q)
        q.add_argument("--sensitivity", action="store_true",
                       help="also search with each efficiency and the step overhead at +-25%%")
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
    cfg = load_experiment(args, DEFAULT_EXPERIMENT)
    check_samples(args.seeds, args.windows)
    criteria = criteria_from(cfg.run.slo, args.percentile, args.goodput)
    if args.sensitivity and cfg.profile.path:
        raise UserError("--sensitivity moves the roofline's efficiencies; a --profile has none")
    if args.capacity_command == "replicas" and args.busiest_window is not None:
        cfg = _busiest_window(cfg, args.busiest_window)
    samples = sample_configs(cfg.workload, args.seeds, args.windows)
    tasks = _tasks(args, cfg, criteria, samples)
    for t in tasks:  # every configuration is checked before anything runs
        try:
            sim_setup(t[2])
        except UserError as e:
            if "leaves no KV memory" not in str(e):
                raise  # a model that does not fit is an answer (a row), not an error
    out = make_out_dir(args.out, cfg.model_dump()) if args.out else None
    with make_executor(args.workers, args.dask) as (ex, where), \
            tqdm(total=len(tasks), desc=args.capacity_command, unit="search",
                 disable=not sys.stderr.isatty(), leave=False) as bar:
        answers = run_all(ex, run_task, tasks, lambda i, a: bar.update())
    main = [a for t, a in zip(tasks, answers) if t[0] is None]
    sens = [(t[0], a) for t, a in zip(tasks, answers) if t[0] is not None]
    setups = {a.label: _setup_or_none(t[2]) for t, a in zip(tasks, answers) if t[0] is None}
    text = report.render(args.capacity_command, main, sens, criteria, cfg, setups, samples,
                         args.gpu_hour_price, where)
    if out:
        files = report.write(out, main, sens, criteria, cfg, args.gpu_hour_price)
        (out / "capacity.json").write_text(to_json(report.as_json(main, sens, args.gpu_hour_price)) + "\n")
        text += f"\nresults written to {out}/ ({', '.join(files)})"
    if args.format == "json":
        print(to_json(report.as_json(main, sens, args.gpu_hour_price)))
    else:
        print(text)
    return 0 if any(a.value is not None for a in main) else 1


def run_task(task: tuple) -> Answer:
    """One search; top level so that a process pool or Dask can ship it."""
    _, kind, cfg, criteria, samples, extra = task
    if kind == "max-rate":
        return search_max_rate(cfg, criteria, samples, rel_tol=extra)
    return search_replicas(cfg, criteria, samples, extra)


def _tasks(args, cfg: ExperimentConfig, criteria, samples) -> list[tuple]:
    """(sensitivity variant or None, kind, cfg, criteria, samples, extra) per search."""
    kind = args.capacity_command
    if kind == "max-rate":
        if not 0 < args.tolerance < 1:
            raise UserError(f"--tolerance must be in (0, 1), got {args.tolerance}")
        configs = [cfg.model_copy(update={"run": cfg.run.model_copy(update={"policies": [p]})}, deep=True)
                   for p in cfg.policies()]
        extra = args.tolerance
    else:
        if args.max_replicas < 1:
            raise UserError(f"--max-replicas must be >= 1, got {args.max_replicas}")
        if len(cfg.policies()) > 1:
            raise UserError("capacity replicas sizes one policy; give one --policy")
        configs = [_candidate(cfg, c) for arg in args.candidate or [] for c in arg.split(",") if c]
        configs = configs or [cfg]
        extra = args.max_replicas
    tasks = [(None, kind, c, criteria, samples, extra) for c in configs]
    if args.sensitivity:
        for c in configs:
            for field, k in SENSITIVITY:
                v = getattr(c.hardware, field) * k
                v = min(v, 1.0) if field != "step_overhead_s" else v
                hw = c.hardware.model_copy(update={field: v})
                tasks.append(((field, k, v, _label(kind, c)), kind,
                              c.model_copy(update={"hardware": hw}, deep=True), criteria, samples, extra))
    return tasks


def _label(kind: str, c: ExperimentConfig) -> str:
    return c.policies()[0] if kind == "max-rate" else \
        f"{c.model.name} TP{c.hardware.tensor_parallel} {c.hardware.name}"


def _candidate(cfg: ExperimentConfig, text: str) -> ExperimentConfig:
    parts = text.split(":")
    if len(parts) != 3 or not parts[1].isdigit() or int(parts[1]) < 1:
        raise UserError(f"--candidate {text!r}: expected MODEL:TP:HARDWARE, e.g. llama-3-70b:4:h100-sxm")
    model, tp, hw = parts
    c = cfg.model_copy(deep=True)
    c.model.name, c.hardware.tensor_parallel, c.hardware.name = model, int(tp), hw
    return c


def _busiest_window(cfg: ExperimentConfig, seconds: float) -> ExperimentConfig:
    if seconds <= 0:
        raise UserError(f"--busiest-window must be > 0 seconds, got {seconds}")
    w = build_workload(cfg.workload.model_copy(update={"rate_scale": 1.0}))
    a = w.arrival
    ends = np.searchsorted(a, a + seconds, side="left")
    i = int(np.argmax(ends - np.arange(len(a))))
    c = cfg.model_copy(deep=True)
    c.workload.window_start_s = cfg.workload.window_start_s + float(a[i])
    c.workload.window_duration_s = seconds
    return c


def _setup_or_none(cfg: ExperimentConfig):
    try:
        return sim_setup(cfg)
    except UserError:
        return None
