"""`batchlab calibrate --endpoint URL`: the designed probes (calibration/from_replay/probes.py)
sent to the server one after another, after an unrecorded warm-up, each written as
`batchlab replay --out` writes a replay; then read back and fitted as --from-replay does
(from_replay.py)."""
from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

from batchlab.calibration.from_replay.probes import HELD, WARMUP, design
from batchlab.calibration.from_replay.read import read_all
from batchlab.core import atomic
from batchlab.core.run_folder import to_json
from batchlab.experiments.calibrate.from_replay import fit_and_report, load_prior, settings_for
from batchlab.experiments.errors import UserError
from batchlab.experiments.output import ResultWriter
from batchlab.experiments.replay.results import failure_summary, run_result, vllm_bench_json
from batchlab.experiments.replay.sender import replay
from batchlab.experiments.replay.target import api_base, make_target


def probe_seed(args: argparse.Namespace) -> int:
    """The probes' base seed: --probe-seed, else a fresh one (printed, to send the same again)."""
    if args.probe_seed is not None:
        if not 0 <= args.probe_seed < 2**31 - 100:
            raise UserError(f"--probe-seed {args.probe_seed}: expected 0 to {2**31 - 101}")
        return args.probe_seed
    seed = secrets.randbelow(2**31 - 100)
    print(f"probe prompts seeded {seed} (--probe-seed {seed} sends the same ones)", file=sys.stderr)
    return seed


def send_probes(args: argparse.Namespace, directory: Path, seats: int) -> list[Path]:
    """Each probe replayed against --endpoint and written as batchlab replay writes it."""
    # A server's first requests pay one-time costs (allocations, lazy initialisation, cold
    # caches) that no later step does: a warm-up goes first and is not recorded, as `vllm
    # bench serve` sends its initial test prompt before it measures.
    base = probe_seed(args)
    warm = make_target(args.endpoint, args.served_model_name, args.api_key,
                       timeout_s=args.request_timeout, vocab_size=32000, seed=base)
    print(f"warm-up: {len(WARMUP.arrival)} requests to {warm.url} (not recorded)", file=sys.stderr, flush=True)
    fails = failure_summary(replay(WARMUP, warm))
    if fails:
        print(f"  warm-up: {fails}", file=sys.stderr)
    paths = []
    for k, (name, w) in enumerate(design(args.probe_max_prompt, seats)):
        # A probe of its own prompts: replay seeds prompt ids by (seed, index), and a server
        # with prefix caching would serve a repeated prompt from cache, which the
        # simulated request list (lengths only) cannot know.
        target = make_target(args.endpoint, args.served_model_name, args.api_key,
                             timeout_s=args.request_timeout, vocab_size=32000, seed=base + 1 + k)
        print(f"probe {name}: {len(w)} requests to {target.url}", file=sys.stderr, flush=True)
        rep = replay(w, target)
        fails = failure_summary(rep)
        if fails:
            print(f"  {fails}", file=sys.stderr)
        meta = {"endpoint": target.url, "model": target.model, "workload": w.describe(), "time_scale": 1.0,
                "seed": base + 1 + k, "vocab_size": 32000, "max_concurrency": w.max_concurrency}
        result = run_result(rep, meta)
        summary = result.summary()
        d = directory / name
        writer = ResultWriter(d, {"probe": name})
        writer.add("replay", result, summary)
        atomic.write_text(d / "result.json", to_json(vllm_bench_json(rep, summary, result.meta, "inf", 1.0)) + "\n")
        paths.append(d)
    return paths


def run_endpoint(args: argparse.Namespace) -> int:
    if not 16 <= args.probe_max_prompt <= 1 << 20:
        raise UserError(f"--probe-max-prompt must be from 16 to {1 << 20}, got {args.probe_max_prompt}")
    if not args.out:
        raise UserError("--endpoint needs --out DIR: the probes' replays and the profile are kept there")
    directory = Path(args.out)
    if directory.exists() and any(directory.iterdir()):
        raise UserError(f"--out {directory}: not empty; --endpoint writes its probes there")
    target = make_target(args.endpoint, args.served_model_name, args.api_key, timeout_s=args.request_timeout,
                         vocab_size=32000, seed=0)
    prior, where = load_prior(args, args.model or target.model)
    settings, why = settings_for(args, api_base(args.endpoint), prior)
    directory.mkdir(parents=True, exist_ok=True)
    paths = send_probes(args, directory, int(settings.max_num_seqs.value))
    try:
        replays = read_all([str(p) for p in paths], None if args.hardware else args.model)
    except ValueError as e:
        raise UserError(str(e)) from None
    held = [Path(r.where.split(" (")[0]).name in HELD for r in replays]
    args.out = str(directory / "profile.json")
    return fit_and_report(args, replays, prior, where, settings, why, held=held)
