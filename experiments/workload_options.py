"""Workload options shared by every command that takes a workload; they override the
[workload] table of a TOML config field by field."""
from __future__ import annotations

import argparse
from typing import Any


def add_workload_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("workload")
    g.add_argument("--workload", dest="wl_source", metavar="SOURCE",
                   help="a synthetic preset (chat, uniform) or a trace file")
    g.add_argument("--num-requests", dest="wl_num_requests", type=int, metavar="N")
    g.add_argument("--rate", dest="wl_rate", type=float, metavar="R",
                   help="requests/s (inf: all at once)")
    g.add_argument("--burstiness", dest="wl_burstiness", type=float, metavar="B",
                   help="Gamma shape of inter-arrival gaps: 1 Poisson, <1 burstier")
    g.add_argument("--seed", dest="wl_seed", type=int, metavar="N")
    g.add_argument("--max-concurrency", dest="wl_max_concurrency", type=int, metavar="N",
                   help="closed loop: at most N requests in flight")
    g.add_argument("--think-time", dest="wl_think_time_s", type=float, metavar="S",
                   help="closed loop: seconds between a reply and that user's next request")


def workload_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The [workload] fields given on the command line (options prefixed wl_)."""
    return {k[3:]: v for k, v in vars(args).items() if k.startswith("wl_") and v is not None}
