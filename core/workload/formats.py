"""Trace formats, how a file's format is detected, and loading one into a Workload.

Formats (columns or JSON keys; extra ones are ignored):
  azure     CSV   TIMESTAMP,ContextTokens,GeneratedTokens    Azure LLM inference 2023
                  TIMESTAMP is a date-time; arrival = seconds since the earliest row
  mooncake  JSONL timestamp (ms), input_length, output_length, hash_ids (prefix blocks)
  lengths   CSV   num_prefill_tokens,num_decode_tokens       no timestamps: arrivals all
                  0 here; build_workload gives them a generated arrival process
  batchlab  CSV   arrival_s,prompt_len,output_len[,priority][,prefix_hashes][,hash_block_size]
            JSONL the same keys; arrival_s is kept as written (seconds, >= 0)

Detection (format "auto") reads the first line that is not blank or a `#` comment: a
JSON object means JSON lines, anything else a CSV header; the format is the one whose
required columns (or keys) that line holds. A named format skips detection, and a
missing column is then reported as such.

Order: a trace whose timestamps go backwards is sorted by arrival (stable, so ties keep
file order) and a warning names the first line out of order and how many are; nothing
is dropped. Token counts must be whole numbers >= 1: a zero-length output is rejected,
since every request generates at least one token.
"""
from __future__ import annotations

import gc
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batchlab.core.checks import MAX_TIME_S
from batchlab.core.workload import parse
from batchlab.core.workload.errors import WorkloadError, warn
from batchlab.core.workload.hashes import MOONCAKE_BLOCK, check_coverage, hash_block_size
from batchlab.core.workload.textfile import (csv_chunks, first_line, json_error, jsonl_chunks,
                                   split_header)
from batchlab.core.workload.workload import Workload


@dataclass(frozen=True)
class Format:
    name: str
    kind: str  # "csv" | "jsonl"
    arrival: str | None  # column holding the time, None: no timestamps
    time: str | None  # "datetime" | "ms" | "s"
    prompt: str
    output: str
    priority: str | None = None  # optional column
    hashes: str | None = None  # optional column
    hash_block: str | None = None  # optional column: tokens per hash (core/workload/hashes.py)

    @property
    def required(self) -> list[str]:
        return [c for c in (self.arrival, self.prompt, self.output) if c]

    @property
    def optional(self) -> list[str]:
        return [c for c in (self.priority, self.hashes, self.hash_block) if c]

    def label(self) -> str:
        cols = ",".join(self.required)
        return f"{self.name} ({'CSV header' if self.kind == 'csv' else 'JSON keys'} {cols})"


FORMATS: list[Format] = [
    Format("azure", "csv", "TIMESTAMP", "datetime", "ContextTokens", "GeneratedTokens"),
    Format("mooncake", "jsonl", "timestamp", "ms", "input_length", "output_length",
           hashes="hash_ids"),
    Format("lengths", "csv", None, None, "num_prefill_tokens", "num_decode_tokens"),
    Format("batchlab", "csv", "arrival_s", "s", "prompt_len", "output_len", "priority",
           "prefix_hashes", "hash_block_size"),
    Format("batchlab", "jsonl", "arrival_s", "s", "prompt_len", "output_len", "priority",
           "prefix_hashes", "hash_block_size"),
]
FORMAT_NAMES = ("auto", *dict.fromkeys(f.name for f in FORMATS))


def detect_format(path: str | Path, name: str = "auto") -> Format:
    """The format of a trace file: the one named, or the one its first line matches."""
    if name not in FORMAT_NAMES:
        raise WorkloadError(path, None, f"unknown trace format {name!r}; expected one of "
                                        f"{', '.join(FORMAT_NAMES)}")
    no, text = first_line(path)
    kind = "jsonl" if text.startswith("{") else "csv"
    candidates = [f for f in FORMATS if f.kind == kind and name in ("auto", f.name)]
    if name != "auto":
        if not candidates:
            want = " or ".join(f.label() for f in FORMATS if f.name == name)
            raise WorkloadError(path, no, f"{'a JSON line' if kind == 'jsonl' else 'a CSV line'}"
                                          f"; expected {want}")
        return candidates[0]
    if kind == "jsonl":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise json_error(path, no, e) from None
        keys = set(obj) if isinstance(obj, dict) else set()
    else:
        keys = set(split_header(text))
    for f in candidates:
        if keys.issuperset(f.required):
            return f
    # A header that has some of a format's columns most likely lacks the others.
    best = max(candidates, key=lambda f: len(keys.intersection(f.required)))
    if keys.intersection(best.required):
        missing = next(c for c in best.required if c not in keys)
        what = "column" if kind == "csv" else "key"
        raise WorkloadError(path, no, f"missing {what} {missing!r}; expected {best.label()}")
    shown = text if len(text) <= 60 else text[:57] + "..."
    raise WorkloadError(path, no, f"cannot tell the trace format from {shown!r}; expected "
                                  f"{'; '.join(f.label() for f in FORMATS)}; or name the "
                                  f"format (--trace-format, [workload] trace_format)")


def load_trace(path: str | Path, format: str = "auto") -> Workload:
    """Read a trace file (any supported format) into a Workload sorted by arrival."""
    # Parsing makes millions of short-lived lists and strings, none in a cycle: the
    # cyclic collector would only slow it down (about 2x for a million rows).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _load(path, detect_format(path, format))
    finally:
        if enabled:
            gc.enable()


def _load(path: str | Path, fmt: Format) -> Workload:
    reader = csv_chunks if fmt.kind == "csv" else jsonl_chunks
    cols: dict[str, list] = {k: [] for k in ("line", "t", "prompt", "output", "prio", "hash",
                                             "hbs")}
    has_priority = False  # a JSON line without the key reads as 0; no line with it: no column
    for nos, vals in reader(path, fmt.required, fmt.optional, f"{fmt.name} format"):
        cols["line"].append(np.array(nos, dtype=np.int64))
        if fmt.time == "datetime":
            cols["t"].append(parse.datetimes(vals[fmt.arrival], nos, path, fmt.arrival))
        elif fmt.time:
            cols["t"].append(parse.times(vals[fmt.arrival], nos, path, fmt.arrival, fmt.time))
        cols["prompt"].append(parse.token_counts(vals[fmt.prompt], nos, path, fmt.prompt))
        cols["output"].append(parse.token_counts(vals[fmt.output], nos, path, fmt.output))
        if fmt.priority in vals:
            has_priority |= any(v not in (None, "") for v in vals[fmt.priority])
            cols["prio"].append(parse.integers(vals[fmt.priority], nos, path, fmt.priority))
        if fmt.hashes in vals:
            cols["hash"].extend(parse.hash_lists(vals[fmt.hashes], nos, path, fmt.hashes,
                                                 text=fmt.kind == "csv"))
        if fmt.hash_block in vals:
            cols["hbs"].append(parse.integers(vals[fmt.hash_block], nos, path, fmt.hash_block))
    lines = np.concatenate(cols["line"])
    n = len(lines)
    prompt, output = np.concatenate(cols["prompt"]), np.concatenate(cols["output"])
    if not fmt.time:
        arrival = np.zeros(n)
    elif fmt.time == "datetime":
        ts = np.concatenate(cols["t"])
        # In whole seconds first: nanoseconds 300 years apart overflow int64.
        secs = ts.astype("datetime64[s]").astype(np.int64)
        if secs.max() - secs.min() >= MAX_TIME_S:  # step durations must stay representable
            i = int(np.argmax(secs))
            raise WorkloadError(path, int(lines[i]), f"{fmt.arrival} is "
                                f"{secs[i] - secs.min():.3g} s after the earliest; expected a "
                                f"trace spanning less than {MAX_TIME_S:g} s (about 3 years)")
        arrival = (ts - ts.min()) / np.timedelta64(1, "s")
    else:
        arrival = np.concatenate(cols["t"])
    priority = np.concatenate(cols["prio"]) if has_priority else None
    hashes = cols["hash"] if any(cols["hash"]) else None
    block = hashes_block(cols, hashes, lines, path, fmt, prompt)
    order = _arrival_order(arrival, lines, path)
    if order is not None:
        arrival = arrival[order]
        prompt, output = prompt[order], output[order]
        priority = priority[order] if priority is not None else None
        hashes = [hashes[i] for i in order] if hashes is not None else None
    w = Workload(arrival, prompt, output, priority=priority, prefix_hashes=hashes,
                 hash_block_size=block)
    if fmt.time:
        extra = ", prefix hashes kept" if w.prefix_hashes is not None else ""
        w.description.append(f"{fmt.name} trace {path}: {n} requests over "
                             f"{w.arrival[-1] - w.arrival[0]:.1f} s{extra}")
    else:
        w.description.append(f"length file {path}: {n} rows")
    return w


def hashes_block(cols: dict[str, list], hashes: list[tuple[int, ...]] | None,
                 lines: np.ndarray, path: str | Path, fmt: Format, prompt: np.ndarray) -> int:
    """The tokens each prefix hash covers, with every row's list checked against it."""
    if hashes is None:
        return MOONCAKE_BLOCK
    has = np.fromiter((bool(h) for h in hashes), dtype=bool, count=len(hashes))
    values = np.concatenate(cols["hbs"]) if cols["hbs"] else None
    block = hash_block_size(values, has, lines, path, fmt.hash_block or "")
    check_coverage(hashes, prompt, block, lines, path, fmt.hashes, fmt.prompt)
    return block


def _arrival_order(arrival: np.ndarray, lines: np.ndarray, path: str | Path
                   ) -> np.ndarray | None:
    """None when already in order; else the stable sorting permutation, with a warning."""
    back = np.flatnonzero(np.diff(arrival) < 0)
    if len(back) == 0:
        return None
    warn(path, int(lines[back[0] + 1]), f"timestamp goes backwards ({len(back)} place(s) in "
                                        f"the file); sorted the requests by arrival")
    return np.argsort(arrival, kind="stable")
