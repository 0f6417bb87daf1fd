"""The endpoint options (`batchlab replay`; `batchlab validate --endpoint`): which server,
with which key, how long to wait, what prompts to send. Light: httpx loads only when a
request is sent."""
from __future__ import annotations

import argparse

from batchlab.experiments.replay.prompts import DEFAULT_VOCAB

API_KEY_ENV = "OPENAI_API_KEY"  # as `vllm bench serve` and the openai client read it


def add_target_options(p: argparse.ArgumentParser, required: bool) -> None:
    """The endpoint options (replay; validate --endpoint)."""
    g = p.add_argument_group("endpoint")
    g.add_argument("--endpoint", required=required, metavar="URL",
                   help="the server, e.g. http://127.0.0.1:8000 (its /v1/completions is called)")
    g.add_argument("--api-key", metavar="KEY", help=f"Bearer token (default: ${API_KEY_ENV})")
    g.add_argument("--request-timeout", type=float, default=600.0, metavar="S",
                   help="a request not finished after S seconds fails (default 600)")
    g.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB, metavar="N",
                   help=f"prompt token ids are drawn below N (default {DEFAULT_VOCAB})")
    g.add_argument("--time-scale", type=float, default=1.0, metavar="K",
                   help="multiply arrival times by K (0: all at once)")
