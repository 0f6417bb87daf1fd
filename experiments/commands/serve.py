"""`batchlab serve`: the torch backend behind an OpenAI-compatible HTTP server
(/v1/completions, /v1/chat/completions, /v1/models, /health, /metrics), with the
scheduler and engine of `batchlab run`. Ctrl-C stops it; --out writes the request and
step tables of everything it served (a new or empty DIR: a served run is never written
over); while it serves, each request's row goes to DIR/POLICY/requests.journal.csv as it
ends, so a kill keeps them (experiments/serve_journal.py)."""
from __future__ import annotations

import argparse
import os
import sys
import time

from batchlab.backend.server.listen import bind, bound_port
from batchlab.experiments.errors import UserError
from batchlab.experiments.options import (add_backend_options, add_common_options, load_experiment, reject_unused,
                                          reject_unused_tables)
from batchlab.experiments.output import ResultWriter, check_out_dir
from batchlab.experiments.run_labels import label_real
from batchlab.experiments.serve_journal import ServeJournal, refuse_used_out
from batchlab.experiments.setup import SERVE_EXPERIMENT, load_runtime
from batchlab.experiments.speculative_options import add_speculative_options, check_run_speculative
from batchlab.experiments.validation import profile_source
from batchlab.experiments.validation.speculative import drafted

API_KEY_ENV = "BATCHLAB_API_KEY"  # as vLLM's VLLM_API_KEY


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="serve the backend over an OpenAI-compatible HTTP API",
                              description=__doc__)
    add_common_options(p)
    g = add_backend_options(p)
    g.add_argument("--temperature", dest="ru_temperature", type=float, metavar="T",
                   help="for requests that give none (default 0: greedy)")
    g = p.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    g.add_argument("--port", type=int, default=8000, help="default 8000")
    g.add_argument("--api-key", metavar="KEY",
                   help=f"every /v1 route demands 'Authorization: Bearer KEY' (default: ${API_KEY_ENV})")
    g.add_argument("--served-model-name", metavar="NAME", help="the model name clients send (default: --model)")
    g.add_argument("--max-request-bytes", type=int, default=4 << 20, metavar="N",
                   help="largest request body accepted (default 4 MiB)")
    add_speculative_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    workload = [k[3:] for k, v in vars(args).items() if k.startswith("wl_") and k != "wl_seed"
                and v is not None]
    if workload:  # --seed stays: it seeds sampling
        raise UserError(f"workload options ({', '.join(workload)}) do not apply to batchlab serve: "
                        f"requests come over HTTP (send a workload with batchlab replay)")
    reject_unused(args, "serve", {"hw_name": "it serves on this machine's device (--device)",
                                  "hw_tensor_parallel": "the backend runs on one device",
                                  "ru_router": "it serves one replica",
                                  "pr_path": "it measures; use it with simulate or validate",
                                  **{f"slo_{s}_ms": "goodput is measured by the client (batchlab replay)"
                                     for s in ("ttft", "tpot", "e2el")}})
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port}: expected 0-65535")
    if args.max_request_bytes < 1024:
        raise UserError(f"--max-request-bytes {args.max_request_bytes}: expected at least 1024")
    cfg = load_experiment(args, SERVE_EXPERIMENT)
    reject_unused_tables(cfg, "serve", {"hardware": "it serves on this machine's device (--device)",
                                        "profile": "it measures; use it with simulate or validate"})
    if cfg.run.replicas != 1:
        raise UserError(f"batchlab serve serves one replica; got replicas={cfg.run.replicas}")
    if len(cfg.policies()) != 1:
        raise UserError(f"batchlab serve runs one policy; got {', '.join(cfg.policies())}")
    check_run_speculative(cfg, None)
    policy = cfg.policies()[0]
    if args.out:  # before torch loads: a used --out is refused at once
        check_out_dir(args.out)
        refuse_used_out(args.out)
    try:
        sock = bind(args.host, args.port)
    except ValueError as e:
        raise UserError(f"--host/--port: {e}") from None
    # The backend (torch) only once the arguments are known to be good and the port bound;
    # load_runtime says in one line when torch is missing.
    port = bound_port(sock)
    t0 = time.perf_counter()
    rt = load_runtime(cfg)
    from batchlab.backend.models import params_label  # lazy: torch, loaded by load_runtime
    from batchlab.backend.server.server import Server  # lazy: torch, loaded by load_runtime
    sched = cfg.scheduler_for(policy, rt.spec.max_context)
    writer = ResultWriter(args.out, cfg.model_dump()) if args.out else None
    name = args.served_model_name or cfg.model.name
    server = Server(rt, sched, model_name=name, api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
                    temperature=cfg.run.temperature, seed=cfg.workload.seed,
                    max_body_bytes=args.max_request_bytes, speculative=cfg.speculative)
    journal = ServeJournal(writer.dir / policy) if writer else None
    if journal:
        server.loop.on_rows = journal.append
    print(f"batchlab serve: {name} ({params_label(rt.spec.params)} params, {rt.device}, "
          f"{rt.threads} thread(s), loaded in {time.perf_counter() - t0:.1f} s), {policy}, "
          f"{server.loop.sched.kv.num_blocks} KV blocks, max_model_len {server.limits.max_model_len}, "
          f"text via {server.codec.name}; http://{args.host}:{port}/v1 (Ctrl-C stops)",
          file=sys.stderr, flush=True)
    speed_cost, speed_source = profile_source.speed_pricing(None, None, rt)
    with profile_source.probe_around(rt.device, speed_cost is None) as probe:
        server.run(sock)
    result = server.result({"host": args.host, "port": port, "served_model_name": name})
    # meta: machine_speed (steps priced with the draft's passes where it drafted), stability
    label_real(result, drafted(speed_cost, result.meta.speculative) if speed_cost is not None else None,
               speed_source, probe)
    summary = result.summary(cfg.run.slo)
    m = result.meta
    print(f"batchlab serve: stopped; {summary['completed']:.0f} requests finished of "
          f"{m.requests_received} received, {m.steps} steps"
          + (f"; {m.error}" if m.error else ""), file=sys.stderr)
    if writer:
        writer.add(policy, result, summary)
        if journal:
            journal.close()
        print(f"results written to {writer.dir}/", file=sys.stderr)
    return 1 if m.error else 0
