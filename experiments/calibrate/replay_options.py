"""The calibrate command's options for fitting request timings (--from-replay, --endpoint).
No heavy import: the command line's parser reads them."""
from __future__ import annotations

import argparse


def add_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("from request timings (--from-replay, --endpoint; docs/calibration.md)")
    g.add_argument("--from-replay", nargs="+", metavar="PATH",
                   help="fit from request timings: batchlab replay --out DIRs, vllm bench serve "
                   "--save-result (or --append-result) --save-detailed JSON, SGLang bench_serving "
                   "--output-details JSONL")
    g.add_argument("--endpoint", metavar="URL", help="probe this OpenAI-compatible server, then fit")
    g.add_argument("--metrics", metavar="URL", help="with --from-replay: the server whose /metrics "
                   "states its engine settings (default: the replay's endpoint, where recorded)")
    g.add_argument("--policy", choices=("continuous", "chunked"),
                   help="the server's scheduling: chunked prefill or not (default continuous)")
    g.add_argument("--max-num-seqs", type=int, metavar="N", help="the server's seats")
    g.add_argument("--max-num-batched-tokens", type=int, metavar="N", help="the server's token budget a step")
    g.add_argument("--num-kv-blocks", type=int, metavar="N", help="the server's KV pool, in blocks")
    g.add_argument("--prefix-caching", dest="prefix_caching", action="store_const", const=True)
    g.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_const", const=False)
    g.add_argument("--server-run", metavar="DIR",
                   help="the --out of the batchlab serve the timings were sent to, once it has stopped: "
                   "its steps measure the per-chunk and after-idle step costs, its requests the front "
                   "end (the client's TTFT less the engine's); each term it cannot tell apart keeps the "
                   "prior, said in one line")
    g.add_argument("--keep-fit", action="store_true",
                   help="write the fitted profile even where the prior did better on the held-out "
                   "requests (default: write the better of the two, saying so)")
    g.add_argument("--hardware", metavar="NAME",
                   help="with a preset model no profile was measured for: price the prior from this "
                   "hardware preset's datasheet (the roofline's efficiencies)")
    g.add_argument("--api-key", metavar="KEY", help="with --endpoint: Bearer token (default: $OPENAI_API_KEY)")
    g.add_argument("--served-model-name", metavar="NAME",
                   help="with --endpoint: the model name (default: the first at /v1/models)")
    g.add_argument("--request-timeout", type=float, default=120.0, metavar="S",
                   help="with --endpoint: a probe request not done after S seconds fails (default 120)")
    g.add_argument("--probe-max-prompt", type=int, default=1024, metavar="N",
                   help="with --endpoint: longest probe prompt (default 1024)")
    g.add_argument("--probe-seed", type=int, metavar="N",
                   help="with --endpoint: seed of the probes' prompt tokens (default: a fresh one, "
                   "printed: a server with prefix caching serves prompts it has seen from its cache, "
                   "so a second calibration against it must not resend the first one's prompts)")
