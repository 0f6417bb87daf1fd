"""`batchlab calibrate --endpoint URL`: the designed probes (calibration/from_replay/probes.py)
sent to the server one after another, after an unrecorded warm-up, each written as
`batchlab replay --out` writes a replay; then read back and fitted as --from-replay does
(from_replay.py). Killed or stopped, the same command into the same --out sends only the
probes not finished (probe_run.py)."""
from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

from batchlab.calibration.from_replay.probes import HELD, WARMUP, design
from batchlab.calibration.from_replay.read import read_all
from batchlab.core import atomic
from batchlab.core.run_folder import META, to_json
from batchlab.experiments.calibrate.from_replay import fit_and_report, load_prior, settings_for
from batchlab.experiments.calibrate.probe_run import (DONE, ProbeRun, earlier_run, fit_command,
                                                      resume_or_refuse)
from batchlab.experiments.errors import UserError
from batchlab.experiments.output import ResultWriter
from batchlab.experiments.replay.results import failure_summary, run_result, vllm_bench_json
from batchlab.experiments.replay.sender import replay
from batchlab.experiments.replay.target import api_base, make_target


def probe_seed(args: argparse.Namespace, before: ProbeRun | None) -> int:
    """The probes' base seed: --probe-seed, else an earlier run's into --out (resumed), else a
    fresh one (printed, to send the same again)."""
    if args.probe_seed is not None:
        if not 0 <= args.probe_seed < 2**31 - 100:
            raise UserError(f"--probe-seed {args.probe_seed}: expected 0 to {2**31 - 101}")
        return args.probe_seed
    if before is not None:
        return before.probe_seed
    seed = secrets.randbelow(2**31 - 100)
    print(f"probe prompts seeded {seed} (--probe-seed {seed} sends the same ones)", file=sys.stderr)
    return seed


def send_probes(args: argparse.Namespace, directory: Path, run: ProbeRun, done: list[str]) -> list[Path]:
    """Each probe not in `done` replayed against --endpoint and written as batchlab replay
    writes it (result.json last: a probe is finished once it exists); every probe's folder."""
    probes = design(run.probe_max_prompt, run.seats)
    base, todo = run.probe_seed, [name for name, _ in probes if name not in done]
    if done:
        print(f"resuming into {directory}: {len(done)} probes finished before ({', '.join(done)}), "
              f"{len(todo)} to send", file=sys.stderr, flush=True)
    try:
        if todo:
            _warm_up(args, base)
        for k, (name, w) in enumerate(probes):
            if name not in done:
                _send_probe(args, directory / name, name, w, base + 1 + k)
                done = [*done, name]
    except KeyboardInterrupt:
        fit = fit_command(directory, done, run.endpoint, args)
        left = f"; or fit the {len(done)} finished: {fit}" if done else ""
        print(f"stopped: the same command again sends the {len(probes) - len(done)} probes not finished{left}",
              file=sys.stderr, flush=True)
        raise
    return [directory / name for name, _ in probes]


def _warm_up(args: argparse.Namespace, base: int) -> None:
    # A server's first requests pay one-time costs (allocations, lazy initialisation, cold
    # caches) that no later step does: a warm-up goes first and is not recorded, as `vllm
    # bench serve` sends its initial test prompt before it measures.
    warm = make_target(args.endpoint, args.served_model_name, args.api_key,
                       timeout_s=args.request_timeout, vocab_size=32000, seed=base)
    print(f"warm-up: {len(WARMUP.arrival)} requests to {warm.url} (not recorded)", file=sys.stderr, flush=True)
    fails = failure_summary(replay(WARMUP, warm))
    if fails:
        print(f"  warm-up: {fails}", file=sys.stderr)


def _send_probe(args: argparse.Namespace, d: Path, name: str, w, seed: int) -> None:
    # A probe of its own prompts: replay seeds prompt ids by (seed, index), and a server
    # with prefix caching would serve a repeated prompt from cache, which the simulated
    # request list (lengths only) cannot know.
    target = make_target(args.endpoint, args.served_model_name, args.api_key,
                         timeout_s=args.request_timeout, vocab_size=32000, seed=seed)
    print(f"probe {name}: {len(w)} requests to {target.url}", file=sys.stderr, flush=True)
    rep = replay(w, target)
    fails = failure_summary(rep)
    if fails:
        print(f"  {fails}", file=sys.stderr)
    meta = {"endpoint": target.url, "model": target.model, "workload": w.describe(), "time_scale": 1.0,
            "seed": seed, "vocab_size": 32000, "max_concurrency": w.max_concurrency}
    result = run_result(rep, meta)
    summary = result.summary()
    writer = ResultWriter(d, {"probe": name})
    writer.add("replay", result, summary)
    atomic.write_text(d / DONE, to_json(vllm_bench_json(rep, summary, result.meta, "inf", 1.0)) + "\n")


def _server_stopped(folder: str) -> bool:
    return (Path(folder) / META).is_file()


def run_endpoint(args: argparse.Namespace) -> int:
    if not 16 <= args.probe_max_prompt <= 1 << 20:
        raise UserError(f"--probe-max-prompt must be from 16 to {1 << 20}, got {args.probe_max_prompt}")
    if not args.out:
        raise UserError("--endpoint needs --out DIR: the probes' replays and the profile are kept there")
    directory = Path(args.out)
    before = earlier_run(directory, args)
    target = make_target(args.endpoint, args.served_model_name, args.api_key, timeout_s=args.request_timeout,
                         vocab_size=32000, seed=0)
    prior, where = load_prior(args, args.model or target.model)
    settings, why = settings_for(args, api_base(args.endpoint), prior)
    run = ProbeRun(probe_seed(args, before), args.probe_max_prompt, int(settings.max_num_seqs.value),
                   api_base(args.endpoint), target.model)
    names = [name for name, _ in design(run.probe_max_prompt, run.seats)]
    done = resume_or_refuse(directory, before, run, names, args) if before else []
    directory.mkdir(parents=True, exist_ok=True)
    run.save(directory)
    paths = send_probes(args, directory, run, done)
    try:
        replays = read_all([str(p) for p in paths], None if args.hardware else args.model)
    except ValueError as e:
        raise UserError(str(e)) from None
    held = [Path(r.where.split(" (")[0]).name in HELD for r in replays]
    if args.server_run and not _server_stopped(args.server_run):
        # The server writes its tables when it stops, which it has not: fit the client's
        # timings now, and say how to refit with the server's once it has.
        print(f"--server-run {args.server_run}: no run folder yet (batchlab serve writes it when it stops); "
              f"fitted on the client's timings only. Once the server has stopped: "
              f"{fit_command(directory, None, run.endpoint, args)}", file=sys.stderr, flush=True)
        args.server_run = None
    args.out = str(directory / "profile.json")
    return fit_and_report(args, replays, prior, where, settings, why, held=held)
