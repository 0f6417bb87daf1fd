"""`batchlab calibrate --endpoint URL`: a designed, bounded set of probe workloads sent to
the server, each kept as a batchlab replay folder, read back through the replay reader,
fitted and judged.

The probes tell the cost terms apart (each varies one thing the others hold):
- batch-N: N requests at once, short prompt, 32 tokens out (N = 1, 4, seats-bounded 16):
  decode steps at several batch sizes -> fixed cost, per sequence, weight streaming vs FLOPs;
- prompt: one request at a time, prompts of 64 .. --probe-max-prompt tokens, 4 out:
  TTFT against prompt length -> matmul FLOPs, attention pairs, per chunk;
- context: 4 requests at once with the longest prompt, 32 out: decode over a long KV ->
  the KV read term;
- load-a, load-b: the same Poisson mix of lengths sent twice: load-a is fitted on, load-b
  is judged (held out) and the pair gives the server's own run-to-run spread;
- load-fast: another load and shape (twice the rate, replies twice as long), judged only.
All told: about 110 requests, none longer than --probe-max-prompt + 128 tokens."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from batchlab.core import atomic
from batchlab.core.workload.workload import Workload
from batchlab.experiments.errors import UserError

HELD = ("load-b", "load-fast")
# Probe k sends prompts seeded base + 1 + k (the warm-up: base): none shares a prefix.
OUT_LEN = 32
# Sent one at a time before the probes, not recorded: a short and a longer prompt.
WARMUP = Workload(np.zeros(3), np.array([32, 256, 32]), np.array([8, 8, 8]), description=["warm-up"],
                  max_concurrency=1)


def design(max_prompt: int, seats: int, seed: int = 0) -> list[tuple[str, Workload]]:
    """(name, workload) of each probe, in the order sent."""
    rng = np.random.default_rng(seed)
    out: list[tuple[str, Workload]] = []

    def wl(name, arrival, prompt, output, conc=None):
        out.append((name, Workload(np.asarray(arrival, float), np.asarray(prompt), np.asarray(output),
                                   description=[f"probe {name}"], max_concurrency=conc)))

    for n in sorted({1, min(4, seats), min(16, seats)}):
        wl(f"batch-{n}", [0.0] * n, [32] * n, [OUT_LEN] * n)
    lens = [p for p in (64, 256, 1024, 2048) if p <= max_prompt] or [max_prompt]
    prompts = [p for p in lens for _ in range(2)]
    wl("prompt", [0.0] * len(prompts), prompts, [4] * len(prompts), conc=1)
    wl("context", [0.0] * 4, [max(lens)] * 4, [OUT_LEN] * 4)
    n = 24
    arrival = np.cumsum(rng.exponential(0.25, n))
    prompt = rng.integers(16, max(lens) + 1, n)
    output = rng.integers(8, 2 * OUT_LEN + 1, n)
    for name in ("load-a", "load-b"):
        wl(name, arrival - arrival[0], prompt, output)
    fast = np.cumsum(rng.exponential(0.125, n))
    wl("load-fast", fast - fast[0], rng.integers(16, max(lens) + 1, n), rng.integers(2 * OUT_LEN, 4 * OUT_LEN + 1, n))
    return out


def add_probe_options(g) -> None:
    g.add_argument("--probe-max-prompt", type=int, default=1024, metavar="N",
                   help="with --endpoint: longest probe prompt (default 1024)")
    g.add_argument("--probe-seed", type=int, metavar="N",
                   help="with --endpoint: seed of the probes' prompt tokens (default: a fresh one, "
                   "printed: a server with prefix caching serves prompts it has seen from its cache, "
                   "so a second calibration against it must not resend the first one's prompts)")


def probe_seed(args: argparse.Namespace) -> int:
    """The probes' base seed: --probe-seed, else a fresh one (printed, to send the same again)."""
    if args.probe_seed is not None:
        if not 0 <= args.probe_seed < 2**31 - 100:
            raise UserError(f"--probe-seed {args.probe_seed}: expected 0 to {2**31 - 101}")
        return args.probe_seed
    import secrets
    seed = secrets.randbelow(2**31 - 100)
    print(f"probe prompts seeded {seed} (--probe-seed {seed} sends the same ones)", file=sys.stderr)
    return seed


def send_probes(args: argparse.Namespace, directory: Path, seats: int) -> list[Path]:
    """Each probe replayed against --endpoint and written as batchlab replay writes it."""
    from batchlab.core.run_folder import to_json
    from batchlab.experiments.output import ResultWriter
    from batchlab.experiments.replay.results import failure_summary, run_result, vllm_bench_json
    from batchlab.experiments.replay.sender import replay
    from batchlab.experiments.replay.target import make_target

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
    from batchlab.calibration.from_replay.cli import fit_and_report, load_prior, settings_for
    from batchlab.calibration.from_replay.read import read_all
    from batchlab.experiments.replay.target import api_base, make_target

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
