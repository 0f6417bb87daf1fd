"""The endpoint source of a validation (sources.py): `batchlab validate --endpoint URL`
replays the workload against a server (any OpenAI-compatible one) once, or --repeats N
times one after another (the same arrivals and lengths; the prompts' tokens seeded seed,
seed+1, ..., so no replay hits the prefix cache another one filled): the replays' spread
is the server's own, beside which the error is judged. The judgement
simulates the identical request list priced by a calibration profile under the scheduler
settings given (they should be the server's: seats, token budget, KV blocks; KV blocks
default to the profile's pool).

A client sees requests, not steps: no step matching or per-step test; queueing delay is
not observable from outside, nor when the server scheduled a request (so the replay is
not labelled stable or overloaded). The machine's speed is: a probe on the idle server
before the first replay and after each one (probe_speed.py) levels each replay for the
normalised variant, as a step table levels a run served here."""
from __future__ import annotations

import argparse

from batchlab.core.workload import Workload
from batchlab.experiments.errors import UserError, warn
from batchlab.experiments.replay.measure import measure
from batchlab.experiments.replay.results import failure_summary
from batchlab.experiments.validation.probe_speed import PROBE, ProbeTimes, mean_tpot_s
from batchlab.experiments.validation.sources import RealRun, RealSide

PROBE_SEED = 1_000_003  # the probes' prompt tokens seeded apart from every replay's

NOT_WITH_ENDPOINT = ("mo_dtype", "mo_device", "mo_threads", "mo_kv_memory", "mo_matmul",
                     "mo_attention", "mo_fused", "mo_cuda_graphs", "mo_one_row_decode")


def check_args(args: argparse.Namespace, profile_path: str | None) -> None:
    given = [d[3:] for d in NOT_WITH_ENDPOINT if getattr(args, d, None) is not None]
    if given:
        raise UserError(f"--{given[0].replace('_', '-')} does not apply with --endpoint: "
                        f"the server there decides how it computes")
    if not profile_path:
        raise UserError("--endpoint needs --profile: fit one to that server first with "
                        "batchlab calibrate --endpoint URL --out DIR (docs/calibration.md)")


def replay_side(args: argparse.Namespace, cfg, workload: Workload, profile) -> tuple[RealSide, str]:
    """The replays as a cell, and what failed in them ('' where nothing did)."""
    schedulers = cfg.schedulers(profile.model.max_context)
    if len(schedulers) != 1:
        raise UserError(f"--endpoint validates the one scheduler the server runs; got "
                        f"{', '.join(schedulers)}")
    (policy, sched), = schedulers.items()
    sched = sched.model_copy(update={"num_kv_blocks": sched.num_kv_blocks or profile.num_kv_blocks,
                                     "block_size": sched.block_size})
    runs, failed = [], []
    probes = [speed_probe(args, 0)]
    for k in range(args.repeats):
        real, rep, target = measure(args, workload, args.served_model_name, cfg.workload.seed + k)
        probes.append(speed_probe(args, k + 1))
        failures = failure_summary(rep)
        if failures:
            where = f"replay {k + 1} of {args.repeats}: " if args.repeats > 1 else ""
            warn(f"{where}{failures}; the comparison counts finished requests only")
            failed.append(where + failures)
        runs.append(RealRun(target.url, real.meta, real.summary(), None, real,
                            probe=ProbeTimes(probes[k], probes[k + 1])))
    return RealSide(target.url, workload, sched, runs, client_timed=True), "; ".join(failed)


def speed_probe(args: argparse.Namespace, k: int) -> float:
    """The idle server's probe mean TPOT (s), the k-th of the validation's."""
    probe, _, _ = measure(args, PROBE, args.served_model_name, PROBE_SEED + k)
    return mean_tpot_s(probe)
