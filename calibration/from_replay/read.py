"""Any replay file or folder to ObservedReplays, the format told from the content:
a directory: batchlab replay --out; a JSON object with input_lens and start_times:
vllm bench serve (or batchlab replay's result.json); JSON lines with input_lens and no
start_times: SGLang bench_serving. Every problem is a one-line ValueError naming the path."""
from __future__ import annotations

from pathlib import Path

from batchlab.calibration.from_replay import read_batchlab, read_sglang, read_vllm
from batchlab.calibration.from_replay.observed import ObservedReplay, check_same, check_usable
from batchlab.core import text_input

FORMATS = ("batchlab replay --out DIR", "vllm bench serve --save-result --save-detailed JSON",
           "SGLang bench_serving --output-details JSONL")


def read_one(path: str | Path) -> list[ObservedReplay]:
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{p}: no such file or directory")
    if read_batchlab.looks_like(p):
        return read_batchlab.read(p)
    try:
        text = text_input.read_text(p)
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{p}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    if read_sglang.looks_like(p, text):
        return read_sglang.read(p, text)
    try:
        data = text_input.loads(text)
    except text_input.DuplicateKey as e:
        raise ValueError(f"{p}: {e}") from None
    except ValueError as e:
        raise ValueError(f"{p}: not JSON ({e}); expected one of: {'; '.join(FORMATS)}") from None
    if read_vllm.looks_like(data):
        return [read_vllm.read(p, data)]
    raise ValueError(f"{p}: not a replay this reads (no input_lens / start_times); expected one "
                     f"of: {'; '.join(FORMATS)}")


def read_all(paths: list[str], model: str | None = None) -> list[ObservedReplay]:
    """Every replay under `paths`: one model, one server setting, enough usable requests.
    `model` (the user's): each replay that names a model must name it."""
    replays = [r for p in paths for r in read_one(p)]
    if model:
        for r in replays:
            if r.model and r.model != model and r.model.rstrip("/").rsplit("/", 1)[-1] != model:
                raise ValueError(f"{r.where}: a replay of model {r.model!r}, not {model!r}")
    check_same(replays)
    check_usable(replays)
    return replays
