"""Any replay file or folder to ObservedReplays, the format told from the content
(formats.py): a directory: batchlab replay --out; JSON, one result object or one a line:
vllm bench serve (--save-result, --append-result, the older format without start_times;
or batchlab replay's result.json) or SGLang bench_serving. Every problem is a one-line
ValueError naming the path; the same requests are never both fitted and judged."""
from __future__ import annotations

import sys
from collections import Counter
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
# Two replays sharing more than this share of the smaller one's requests hold the same run.
SAME_SHARE = 0.5


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


def _requests(r: ObservedReplay) -> Counter:
    """Each request as its lengths and time to first token to 10 us: the same request read
    from two files (a replay folder and its result.json, whose ends differ) keys alike,
    while a server never repeats a first token to 10 us (its jitter is 100s of us)."""
    return Counter((q.prompt_len, q.output_len, round(q.ttft_s * 1e5)) for q in r.requests)


def check_apart(replays: list[ObservedReplay]) -> None:
    """No two replays share most of their requests: one fitted and the other judged would be
    judged on what it was fitted on (a file given twice, a run appended twice, a replay
    folder and its own result.json). Two runs of one workload share a request only by chance."""
    keyed = [(r, _requests(r)) for r in replays]
    for i, (a, ka) in enumerate(keyed):
        for b, kb in keyed[i + 1:]:
            shared = sum((ka & kb).values())
            smaller = min(len(a.requests), len(b.requests))
            if smaller and shared > SAME_SHARE * smaller:
                raise ValueError(f"{b.where}: {shared} of its {len(b.requests)} requests are the same "
                                 f"requests as {a.where}'s (lengths and first token to 10 us); "
                                 f"given twice they would be fitted and judged on themselves: give each once")


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
