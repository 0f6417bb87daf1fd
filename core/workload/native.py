"""Writing the batchlab trace format, so that any source (a converted log, a windowed and
scaled production trace, a synthetic mix) can be saved once and replayed exactly.

CSV:   `#` comment lines (the workload's description), then the header
       arrival_s,prompt_len,output_len[,priority][,prefix_hashes,hash_block_size]
       arrival_s: seconds (>= 0, written exactly: floats round-trip); lengths: tokens;
       priority: integer, lower = more important; prefix_hashes: integers separated by
       spaces, one per hash_block_size tokens of prompt (the last block may be partial).
JSONL: one object per line with the same keys (prefix_hashes as a JSON list); no
       comments, so that any JSON tool reads it.
Closed-loop settings (max concurrency, think time) belong to the experiment, not the
trace; the CSV comment records them.
"""
from __future__ import annotations

import json
from pathlib import Path

from batchlab.core.workload.errors import WorkloadError
from batchlab.core.workload.workload import Workload
from batchlab.core import atomic

SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}


def trace_kind(path: str | Path, kind: str | None = None) -> str:
    """csv | jsonl: as named, or from the file suffix."""
    kind = kind or SUFFIXES.get(Path(path).suffix.lower())
    if kind not in ("csv", "jsonl"):
        raise WorkloadError(path, None, "cannot tell what to write from the suffix; expected "
                                        "a name ending in .csv or .jsonl")
    return kind


def write_trace(w: Workload, path: str | Path, kind: str | None = None) -> None:
    """Write `w` in the batchlab format (CSV or JSON lines, see the module docstring)."""
    kind = trace_kind(path, kind)
    cols = {"arrival_s": w.arrival.tolist(), "prompt_len": w.prompt_len.tolist(),
            "output_len": w.output_len.tolist()}
    if w.priority is not None:
        cols["priority"] = w.priority.tolist()
    if w.prefix_hashes is not None:
        cols["prefix_hashes"] = ([" ".join(map(str, h)) for h in w.prefix_hashes]
                                 if kind == "csv" else [list(h) for h in w.prefix_hashes])
        cols["hash_block_size"] = [w.hash_block_size] * len(w)
    rows = zip(*cols.values())
    try:
        with atomic.atomic_open(path, "w", encoding="utf-8", newline="\n") as f:
            if kind == "csv":
                f.write("# batchlab trace\n")
                f.writelines(f"# {step}\n" for step in w.description)
                f.write(",".join(cols) + "\n")
                f.writelines(",".join(map(str, row)) + "\n" for row in rows)
            else:
                keys = list(cols)
                f.writelines(json.dumps(dict(zip(keys, row))) + "\n" for row in rows)
    except OSError as e:
        raise WorkloadError(path, None, f"cannot write: {e.strerror}") from None
