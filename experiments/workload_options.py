"""Workload options shared by every command that takes a workload; they override the
[workload] table of a TOML config field by field (dest wl_<field>)."""
from __future__ import annotations

import argparse
from typing import Any

from batchlab.core.workload import FORMAT_NAMES, PRESETS, TRACES


def add_workload_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("workload")
    g.add_argument("--workload", dest="wl_source", metavar="SOURCE",
                   help=f"a synthetic preset ({', '.join(PRESETS)}), a shared trace "
                        f"({', '.join(TRACES)}) or a trace file")
    g.add_argument("--trace-format", dest="wl_trace_format", choices=FORMAT_NAMES,
                   help="the trace file's format (default: auto, detected from the file)")
    g.add_argument("--num-requests", dest="wl_num_requests", type=int, metavar="N",
                   help="presets: generate N; traces: keep the first N")
    g.add_argument("--rate", dest="wl_rate", type=float, metavar="R",
                   help="requests/s (inf: all at once); on a trace: rescale time to this "
                        "mean rate")
    g.add_argument("--burstiness", dest="wl_burstiness", type=float, metavar="B",
                   help="Gamma shape of generated inter-arrival gaps: 1 Poisson, <1 burstier")
    g.add_argument("--length-file", dest="wl_length_file", metavar="FILE",
                   help="presets: draw (prompt, output) lengths from this length or trace file")
    g.add_argument("--seed", dest="wl_seed", type=int, metavar="N")
    g.add_argument("--max-concurrency", dest="wl_max_concurrency", type=int, metavar="N",
                   help="closed loop: at most N requests in flight")
    g.add_argument("--think-time", dest="wl_think_time_s", type=float, metavar="S",
                   help="closed loop: seconds between a reply and that user's next request")
    g.add_argument("--system-prompt-len", dest="wl_system_prompt_len", type=int, metavar="N",
                   help="presets: a shared system prompt of N tokens before every prompt")
    g.add_argument("--turns", dest="wl_turns", type=float, metavar="T",
                   help="presets: multi-turn chat, T turns per conversation on average")
    g.add_argument("--turn-gap", dest="wl_turn_gap_s", type=float, metavar="S",
                   help="multi-turn: mean think time between turns (default 20)")
    g = parser.add_argument_group(
        "workload transformations (fixed order: see docs/workloads.md; each is recorded)")
    g.add_argument("--jitter", dest="wl_jitter_s", type=float, metavar="S",
                   help="spread each arrival uniformly within S seconds (coarse timestamps)")
    g.add_argument("--window-start", dest="wl_window_start_s", type=float, metavar="S",
                   help="keep arrivals from S seconds on (shifted to start at 0)")
    g.add_argument("--window-duration", dest="wl_window_duration_s", type=float, metavar="S",
                   help="keep S seconds of arrivals")
    g.add_argument("--resample", dest="wl_resample", choices=("requests", "windows"),
                   help="traces: each seed a bootstrap replicate (requests: lengths drawn with "
                   "replacement; windows: blocks of --resample-block seconds), so --seeds spans the "
                   "workload's own variability")
    g.add_argument("--resample-block", dest="wl_resample_block_s", type=float, metavar="S",
                   help="--resample windows: block length in seconds (default 60)")
    g.add_argument("--rate-scale", dest="wl_rate_scale", type=float, metavar="K",
                   help="multiply the arrival rate by K (time runs K times faster)")
    g.add_argument("--length-scale", dest="wl_length_scale", type=float, metavar="K",
                   help="divide prompt and output lengths by K (at least 1 token)")
    g.add_argument("--max-prompt-len", dest="wl_max_prompt_len", type=int, metavar="N",
                   help="clip prompt lengths to N tokens")
    g.add_argument("--max-output-len", dest="wl_max_output_len", type=int, metavar="N",
                   help="clip output lengths to N tokens")


def workload_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The [workload] fields given on the command line (options prefixed wl_)."""
    return {k[3:]: v for k, v in vars(args).items() if k.startswith("wl_") and v is not None}
