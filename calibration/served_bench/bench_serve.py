"""`vllm bench serve --save-result` files as benchmark rows: one JSON file a run, the layout
vllm-project/vllm @ 009e6d4 vllm/benchmarks/serve.py writes (model_id, num_prompts,
request_rate, max_concurrency, then the run's completed, failed, total_input_tokens,
total_output_tokens, mean_ttft_ms, mean_tpot_ms, ...; input_lens and output_lens only with
--save-detailed).

The file does not name the GPU, the TP degree or the weights' precision: they come from the
command line (ServeSetting), and model_id names the model unless a preset is given. A row
is a closed loop: a run at --max-concurrency N with --request-rate inf (the shared table's
kind); an open loop at a finite rate is refused, as the fit's recorded steps assume the
closed loop (recorded.py). Every problem is one line naming the file and the field."""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

from batchlab.calibration.operators.tables import CONFLICT_RATIO, OperatorTableError
from batchlab.calibration.served_bench.read import (MAX_CONCURRENCY, MAX_TOKENS, MODELS, PRECISIONS, SYSTEMS,
                                                    BenchmarkRow)

@dataclass(frozen=True)
class ServeSetting:
    """What the files do not say: the catalogue GPU, the TP degree, the weights' precision
    as the shared table names it ("" the checkpoint's own, bf16, fp8, fp4) and, optionally,
    the batchlab model preset (else model_id's)."""
    gpu: str
    tp: int
    precision: str = ""
    model: str | None = None


def _field(path: Path, data: dict, name: str, expected: str):
    if name not in data or data[name] is None:
        raise OperatorTableError(f"{path}: field {name}: missing (expected {expected}; vllm bench serve "
                                 f"--save-result writes it)")
    return data[name]


def _positive(path: Path, data: dict, name: str) -> float:
    v = _field(path, data, name, "a positive number")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise OperatorTableError(f"{path}: field {name}: expected a positive number, got {v!r}")
    return float(v)


def _mean_length(path: Path, data: dict, lens: str, total: str, completed: int, most: int) -> int:
    """Every request's length: `lens` (--save-detailed), all one length, or else `total` /
    completed rounded (the totals cannot show a spread: the mean stands for every request)."""
    if isinstance(data.get(lens), list) and data[lens]:
        values = data[lens]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
            raise OperatorTableError(f"{path}: field {lens}: expected positive whole token counts")
        if len(set(values)) > 1:
            raise OperatorTableError(f"{path}: field {lens}: lengths {min(values)}-{max(values)} differ; a row is "
                                     f"one length for every request (--random-range-ratio 0, --ignore-eos)")
        return values[0]
    mean = _positive(path, data, total) / completed
    if round(mean) < 1:
        raise OperatorTableError(f"{path}: field {total}: {mean:.2f} tokens a request; expected at least 1")
    if round(mean) > most:
        raise OperatorTableError(f"{path}: field {total}: {round(mean)} tokens a request is past {most}")
    return round(mean)


def read_bench_serve_file(path: Path, setting: ServeSetting) -> BenchmarkRow:
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise OperatorTableError(f"{path}: cannot read it ({e.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise OperatorTableError(f"{path}: not JSON ({e})") from None
    if not isinstance(data, dict):
        raise OperatorTableError(f"{path}: expected one vllm bench serve result (a JSON object)")
    rate = _field(path, data, "request_rate", '"inf"')
    if rate != "inf" and not (isinstance(rate, (int, float)) and math.isinf(rate)):
        raise OperatorTableError(f"{path}: field request_rate: {rate!r}, an open loop; a row is a closed loop "
                                 f"(vllm bench serve --max-concurrency N --request-rate inf)")
    users = _field(path, data, "max_concurrency", "the run's --max-concurrency")
    if isinstance(users, bool) or not isinstance(users, int) or not 1 <= users <= MAX_CONCURRENCY:
        raise OperatorTableError(f"{path}: field max_concurrency: expected a whole number 1 to {MAX_CONCURRENCY}, "
                                 f"got {users!r}")
    completed = _positive(path, data, "completed")
    if data.get("failed"):
        raise OperatorTableError(f"{path}: field failed: {data['failed']!r} requests failed; the means are not "
                                 f"the configuration's")
    model_id = _field(path, data, "model_id", "the served model's name")
    model = setting.model or MODELS.get(model_id)
    if model is None:
        raise OperatorTableError(f"{path}: field model_id: {model_id!r} is not one batchlab knows (known: "
                                 f"{', '.join(MODELS)}); give the preset (--model)")
    ttft, tpot = (_positive(path, data, f) / 1e3 for f in ("mean_ttft_ms", "mean_tpot_ms"))
    return BenchmarkRow(
        line=0, model_id=str(model_id), model=model, gpu=setting.gpu, dtype=PRECISIONS[setting.precision],
        precision=setting.precision, tp=setting.tp, concurrency=users,
        isl=_mean_length(path, data, "input_lens", "total_input_tokens", int(completed), MAX_TOKENS),
        osl=_mean_length(path, data, "output_lens", "total_output_tokens", int(completed), MAX_TOKENS),
        ttft_s=ttft, tpot_s=tpot, engine_version="", source=str(path))


def bench_serve_files(path: Path) -> list[Path]:
    """path itself (a file) or the .json files in it (a folder), in name order."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".json" and p.is_file())
        if not files:
            raise OperatorTableError(f"{path}: a folder with no .json files (vllm bench serve --save-result's)")
        return files
    return [path]


def read_bench_serve(paths: list[Path], setting: ServeSetting) -> list[BenchmarkRow]:
    """One row a file (a folder: its .json files), in order of load curve and concurrency; a
    ValueError of one line for the first bad field, or for two files of the same configuration
    that disagree."""
    if setting.gpu not in SYSTEMS.values():
        raise OperatorTableError(f"--gpu {setting.gpu!r}: expected one of {', '.join(SYSTEMS.values())} "
                                 f"(the presets the served engine's facts cover)")
    if setting.precision not in PRECISIONS:
        raise OperatorTableError(f"--precision {setting.precision!r}: expected one of "
                                 f"{', '.join(p or repr('') for p in PRECISIONS)}")
    seen: dict[tuple, BenchmarkRow] = {}
    for path in paths:
        for f in bench_serve_files(path):
            row = read_bench_serve_file(f, setting)
            key = (row.curve, row.concurrency)
            seen[key] = _repeat(f, seen[key], row) if key in seen else row
    return sorted(seen.values(), key=lambda r: (r.curve, r.concurrency))  # along each load curve


def _repeat(path: Path, first: BenchmarkRow, again: BenchmarkRow) -> BenchmarkRow:
    """Two runs of one configuration: their mean, or a one-line error where they disagree."""
    for name, a, b in (("mean_ttft_ms", first.ttft_s, again.ttft_s), ("mean_tpot_ms", first.tpot_s, again.tpot_s)):
        if max(a, b) > CONFLICT_RATIO * min(a, b):
            raise OperatorTableError(f"{path}: field {name}: {b * 1e3:.4g} ms conflicts with {a * 1e3:.4g} ms in "
                                     f"{first.source} for the same configuration (x{CONFLICT_RATIO} at most)")
    return dataclasses.replace(first, ttft_s=(first.ttft_s + again.ttft_s) / 2, tpot_s=(first.tpot_s + again.tpot_s) / 2)
