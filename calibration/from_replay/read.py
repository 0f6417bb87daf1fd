"""Any replay file or folder to ObservedReplays, the format told from the content
(formats.py): a directory: batchlab replay --out; JSON, one result object or one a line:
vllm bench serve (--save-result, --append-result, the older format without start_times;
or batchlab replay's result.json) or SGLang bench_serving. Every problem is a one-line
ValueError naming the path; the same requests are never both fitted and judged."""
from __future__ import annotations

import sys
from pathlib import Path

from batchlab.calibration.from_replay import read_batchlab, read_sglang, read_vllm
from batchlab.calibration.from_replay.formats import SGLANG, objects, which
from batchlab.calibration.from_replay.observed import ObservedReplay, check_same, check_usable
from batchlab.core import text_input

FORMATS = ("batchlab replay --out DIR", "vllm bench serve --save-result (or --append-result) "
           "--save-detailed JSON", "SGLang bench_serving --output-details JSONL")
EXPECTED = "; ".join(FORMATS)
# A file this large is read with a line on stderr first (where stderr is a terminal, any).
LONG_READ_BYTES = 20 * 2**20


def read_one(path: str | Path) -> list[ObservedReplay]:
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{p}: no such file or directory")
    if read_batchlab.looks_like(p):
        return read_batchlab.read(p)
    try:
        size = p.stat().st_size
        if size > LONG_READ_BYTES or sys.stderr.isatty():
            print(f"reading {p} ({size / 2**20:,.1f} MB) ...", file=sys.stderr, flush=True)
        text = text_input.read_text(p)
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{p}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    out = []
    for where, obj in objects(str(p), text, EXPECTED):
        if which(obj, where, EXPECTED) == SGLANG:
            out.append(read_sglang.from_object(obj, where))
        else:
            out.append(read_vllm.from_object(obj, where))
    if not out:
        raise ValueError(f"{p}: empty; expected one of: {EXPECTED}")
    return out


def check_apart(replays: list[ObservedReplay]) -> None:
    """No two replays hold the same requests: one fitted and the other judged would be
    judged on what it was fitted on (a file given twice, a run appended twice)."""
    seen: dict[tuple, str] = {}
    for r in replays:
        key = tuple((q.prompt_len, q.output_len, q.ttft_s, q.e2e_s) for q in r.requests)
        if key in seen:
            raise ValueError(f"{r.where}: the same requests as {seen[key]}; a replay given twice would "
                             f"be fitted and judged on itself: give each once")
        seen[key] = r.where


def read_all(paths: list[str], model: str | None = None) -> list[ObservedReplay]:
    """Every replay under `paths`: one model, one server setting, enough usable requests.
    `model` (the user's): each replay that names a model must name it."""
    given: dict[Path, str] = {}
    for p in paths:
        key = Path(p).resolve()
        if key in given:
            raise ValueError(f"{p}: given twice (as {given[key]}); a replay given twice would be "
                             f"fitted and judged on itself: give each once")
        given[key] = p
    replays = [r for p in paths for r in read_one(p)]
    if model:
        for r in replays:
            if r.model and r.model != model and r.model.rstrip("/").rsplit("/", 1)[-1] != model:
                raise ValueError(f"{r.where}: a replay of model {r.model!r}, not {model!r}")
    check_same(replays)
    check_usable(replays)
    check_apart(replays)
    return replays
