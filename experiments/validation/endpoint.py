"""`batchlab validate --endpoint URL`: the real run is a replay against a server (any
OpenAI-compatible one), the simulated run is the identical request list priced by a
calibration profile, under the scheduler settings given (they should be the server's:
seats, token budget, KV blocks; KV blocks default to the profile's pool).

A client sees requests, not steps: the report is the metrics table of `batchlab
validate` (TTFT, TPOT, ITL, E2E latency, throughput; queueing delay is not observable
from outside), without the step matching, divergence and overhead sections that need
the server's step table."""
from __future__ import annotations

import argparse
import sys

from batchlab.core.workload import Workload
from batchlab.experiments.errors import UserError, warn
from batchlab.experiments.output import to_json
from batchlab.experiments.replay.results import failure_summary
from batchlab.experiments.validation import compare
from batchlab.experiments.validation.pair import run_sim
from batchlab.experiments.validation.text import metrics_table
from batchlab.experiments.validation.validate import HEADLINE

NOT_WITH_ENDPOINT = ("mo_dtype", "mo_device", "mo_threads", "mo_kv_memory", "mo_matmul")


def check_args(args: argparse.Namespace, profile_path: str | None) -> None:
    given = [d[3:] for d in NOT_WITH_ENDPOINT if getattr(args, d, None) is not None]
    if given:
        raise UserError(f"--{given[0].replace('_', '-')} does not apply with --endpoint: "
                        f"the server there decides how it computes")
    if not profile_path:
        raise UserError("--endpoint needs --profile: an external server cannot be calibrated "
                        "from here (see docs/serve.md for what request timings can fit)")


def comparison(real, sim, policy: str, profile_info: dict, endpoint: str) -> dict:
    cells = compare.compare_summaries(real.summary(), sim.summary())
    metrics = [c.as_dict() for c in cells]
    return {"policy": policy, "headline": HEADLINE, "endpoint": endpoint,
            "workload": real.meta.workload, "profile": profile_info,
            "failed": real.meta.failed, "metrics": metrics,
            "misses": [f"{c.metric} {c.stat}" for c in compare.misses(cells)],
            "worst_error": compare.worst(cells), "variants": {HEADLINE: {"metrics": metrics}}}


def render(comp: dict) -> str:
    head = (f"[{comp['policy']}] {comp['endpoint']} vs simulated ({HEADLINE}: "
            f"{comp['profile'].get('describe', 'profile')}); {compare.target_legend()}")
    note = ("from an endpoint only request timings are seen: no step matching, divergence or "
            "overhead (those need the server's step table); queueing delay is not observable")
    return "\n".join([head, "", metrics_table(comp), "", note])


def validate_endpoint(args: argparse.Namespace, cfg, workload: Workload, profile, info: dict) -> int:
    from batchlab.experiments.replay.measure import measure

    schedulers = cfg.schedulers(profile.model.max_context)
    if len(schedulers) != 1:
        raise UserError(f"--endpoint validates the one scheduler the server runs; got "
                        f"{', '.join(schedulers)}")
    (policy, sched), = schedulers.items()
    sched = sched.model_copy(update={"num_kv_blocks": sched.num_kv_blocks or profile.num_kv_blocks,
                                     "block_size": sched.block_size})
    real, rep, target = measure(args, workload, args.served_model_name, cfg.workload.seed)
    failures = failure_summary(rep)
    if failures:
        warn(f"{failures}; the comparison counts finished requests only")
    sim = run_sim(workload, sched, profile.simulation_cost(), {"cost_model": HEADLINE, **info}).result
    comp = comparison(real, sim, policy, info, target.url)
    if args.out:
        from batchlab.core.run_folder import REQUESTS, write_table
        from batchlab.experiments.output import make_out_dir
        d = make_out_dir(args.out, cfg.model_dump())
        for name, result in (("real", real), ("sim", sim)):
            (d / name).mkdir(exist_ok=True)
            write_table(d / name / REQUESTS, result.requests)
        (d / "comparison.json").write_text(to_json({policy: comp}) + "\n")
    print(to_json({policy: comp}) if args.format == "json" else render(comp))
    if args.out and args.format != "json":
        print(f"results written to {args.out}/", file=sys.stderr)
    return 1 if failures else 0
