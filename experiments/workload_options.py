"""Workload options shared by every command that takes a workload; they override the
[workload] table of a TOML config field by field (dest wl_<field>)."""
from __future__ import annotations

import argparse
from typing import Any

from batchlab.core.workload import FORMAT_NAMES, PRESETS, TRACES


# The workload's options, a row each: (flag, dest, type or choices, metavar, help), type
# None for text; a title alone starts an argument group.
ROWS = (
    "workload",
    ("--workload", "wl_source", None, "SOURCE",
     f"a synthetic preset ({', '.join(PRESETS)}), a shared trace ({', '.join(TRACES)}) or a trace file"),
    ("--trace-format", "wl_trace_format", FORMAT_NAMES, None,
     "the trace file's format (default: auto, detected from the file)"),
    ("--num-requests", "wl_num_requests", int, "N",
     "presets: generate N; traces: keep the first N"),
    ("--rate", "wl_rate", float, "R",
     "requests/s (inf: all at once); on a trace: rescale time to this mean rate"),
    ("--burstiness", "wl_burstiness", float, "B",
     "Gamma shape of generated inter-arrival gaps: 1 Poisson, <1 burstier"),
    ("--length-file", "wl_length_file", None, "FILE",
     "presets: draw (prompt, output) lengths from this length or trace file"),
    ("--seed", "wl_seed", int, "N",
     None),
    ("--max-concurrency", "wl_max_concurrency", int, "N",
     "closed loop: at most N requests in flight"),
    ("--think-time", "wl_think_time_s", float, "S",
     "closed loop: seconds between a reply and that user's next request"),
    ("--system-prompt-len", "wl_system_prompt_len", int, "N",
     "presets: a shared system prompt of N tokens before every prompt"),
    ("--turns", "wl_turns", float, "T",
     "presets: multi-turn chat, T turns per conversation on average"),
    ("--turn-gap", "wl_turn_gap_s", float, "S",
     "multi-turn: mean think time between turns (default 20)"),
    "workload transformations (fixed order: see docs/workloads.md; each is recorded)",
    ("--jitter", "wl_jitter_s", float, "S",
     "spread each arrival uniformly within S seconds (coarse timestamps)"),
    ("--window-start", "wl_window_start_s", float, "S",
     "keep arrivals from S seconds on (shifted to start at 0)"),
    ("--window-duration", "wl_window_duration_s", float, "S",
     "keep S seconds of arrivals"),
    ("--rate-scale", "wl_rate_scale", float, "K",
     "multiply the arrival rate by K (time runs K times faster)"),
    ("--length-scale", "wl_length_scale", float, "K",
     "divide prompt and output lengths by K (at least 1 token)"),
    ("--max-prompt-len", "wl_max_prompt_len", int, "N",
     "clip prompt lengths to N tokens"),
    ("--max-output-len", "wl_max_output_len", int, "N",
     "clip output lengths to N tokens"),
)


def add_rows(parser: argparse.ArgumentParser, rows: tuple) -> None:
    """Options from a table (ROWS' form), each flag and the field it sets written once."""
    group = parser
    for row in rows:
        if isinstance(row, str):
            group = parser.add_argument_group(row)
            continue
        flag, dest, kind, metavar, text = row
        how = {"choices": kind} if isinstance(kind, tuple) else {"type": kind}
        group.add_argument(flag, dest=dest, metavar=metavar, help=text, **how)


def add_workload_options(parser: argparse.ArgumentParser) -> None:
    add_rows(parser, ROWS)


def workload_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The [workload] fields given on the command line (options prefixed wl_)."""
    return {k[3:]: v for k, v in vars(args).items() if k.startswith("wl_") and v is not None}
