"""The run folder: how a run (core/result.py RunResult) is kept on disk. Written here and
read back here only, whoever ran it (simulate, run, serve, replay, validate):

    requests.csv   the request table (core/metrics.py), with each finished request's
                   latencies in ms where the writer adds them (with_latencies)
    steps.csv      the step table (absent: the run kept totals only)
    meta.json      what ran, on what, how it went: core/run_meta.py RunMeta
    summary.json   the run's summary (core/summary.py), with its stability verdict

Layouts made of it, all readable by find_runs:
- one run folder, all four files in it (validate --out's POLICY/real, POLICY/sim, ...);
- `batchlab simulate/run/serve/replay --out DIR` (RunSet): DIR/meta.json and
  DIR/summary.json keyed by policy (rewritten after each run, so an interrupt keeps what
  finished), DIR/POLICY/requests.csv and steps.csv;
- `batchlab validate --out DIR`: DIR/POLICY/real, real_2, ... (--repeats), each a run folder.
Every problem reading one is a ValueError of one line naming the folder or file."""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from batchlab.core.checks import shown
from batchlab.core.features import (
    FEATURE_NAMES, IDLE_GAP_S, LATER_FEATURES, PREFILL_PAIRS, SELF_PAIRS, WINDOW_FEATURES, masked_pairs_estimate,
    self_pairs_estimate)
from batchlab.core.result import RunResult
from batchlab.core.run_meta import RunMeta
from batchlab.core import atomic, text_input

REQUESTS, STEPS, META, SUMMARY = "requests.csv", "steps.csv", "meta.json", "summary.json"
TABLES = (REQUESTS, STEPS)
# What a step table must have to be priced again (the later features are derived).
STEP_COLUMNS = ("start_s", "duration_s") + tuple(n for n in FEATURE_NAMES
                                                  if n not in LATER_FEATURES + WINDOW_FEATURES
                                                  + (PREFILL_PAIRS, SELF_PAIRS))


# -- writing ---------------------------------------------------------------------------
def _clean(x: Any) -> Any:
    """JSON has no NaN: write null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def to_json(obj: Any) -> str:
    return json.dumps(_clean(obj), indent=2, sort_keys=False)


def write_table(path: Path, table: dict[str, np.ndarray]) -> None:
    cols = list(table)
    with atomic.atomic_open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerows(zip(*(table[c].tolist() for c in cols)))


def with_latencies(req: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The request table plus each finished request's latencies in ms, as `vllm bench
    serve` defines them: ttft (arrival to first token), tpot ((e2el - ttft) / (output
    tokens - 1), for replies of more than one token), e2el (arrival to last token) and
    queueing delay (arrival to first scheduled). Empty (NaN) for the others."""
    done = req["status"] == "finished"
    nan = np.where(done, 1.0, np.nan)
    arrival, first, finish = req["arrival_s"], req["first_token_s"], req["finish_s"]
    multi = np.where(req["output_len"] > 1, 1.0, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = (finish - first) / (req["output_len"] - 1) * multi
    return {**req, "ttft_ms": (first - arrival) * 1000 * nan, "tpot_ms": tpot * 1000 * nan,
            "e2el_ms": (finish - arrival) * 1000 * nan,
            "queueing_delay_ms": (req["first_scheduled_s"] - arrival) * 1000 * nan}


def write_tables(folder: Path, result: RunResult, latencies: bool = True) -> list[Path]:
    """The run's request table (with_latencies, unless `latencies` is False) and its step
    table, where it kept one, in `folder` (created)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_table(folder / REQUESTS, with_latencies(result.requests) if latencies else result.requests)
    if result.steps is None:
        return [folder / REQUESTS]
    write_table(folder / STEPS, result.steps)
    return [folder / REQUESTS, folder / STEPS]


def write_run(folder: Path, result: RunResult, summary: dict, latencies: bool = False) -> list[Path]:
    """One run folder: its tables, meta.json and summary.json; the tables' paths."""
    written = write_tables(folder, result, latencies)
    atomic.write_text(folder / META, to_json(result.meta.as_dict()) + "\n")
    atomic.write_text(folder / SUMMARY, to_json(summary) + "\n")
    return written


class RunSet:
    """Runs side by side in one directory, by name (a policy): each one's tables in
    DIR/NAME/, every meta and summary in DIR/meta.json and DIR/summary.json keyed by
    name, rewritten after each run so an interrupt keeps what finished."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.summaries: dict[str, dict] = {}
        self.metas: dict[str, RunMeta] = {}

    def add(self, name: str, result: RunResult, summary: dict) -> None:
        write_tables(self.dir / name, result)
        self.summaries[name] = summary
        self.metas[name] = result.meta
        atomic.write_text(self.dir / SUMMARY, to_json(self.summaries) + "\n")
        atomic.write_text(self.dir / META, to_json({k: m.as_dict() for k, m in self.metas.items()}) + "\n")


# -- reading ---------------------------------------------------------------------------
def read_object(path: Path, where: str) -> dict:
    """A JSON file holding one object (a run's meta.json, summary.json, config.json): a
    ValueError of one line naming `where` and the file where it cannot be read or is not."""
    try:
        data = text_input.loads(text_input.read_text(path))
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: cannot read {path.name} ({getattr(e, 'strerror', None) or e})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: {path.name} is not JSON ({e.msg} at line {e.lineno})") from None
    except text_input.DuplicateKey as e:
        raise ValueError(f"{where}: {path.name}: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: {path.name} is not a batchlab run's (expected an object)")
    return data


def parse_meta(data: dict, path: Path, key: str = "") -> RunMeta:
    """A run's meta (under `key` of the file at `path`, if keyed by policy) as RunMeta; a
    field of the wrong type is a one-line ValueError naming the file and the field."""
    try:
        return RunMeta.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in ((key,) if key else ()) + tuple(first["loc"]))
        expected = first["msg"].removeprefix("Input should be ").removeprefix("Value error, ")
        raise ValueError(f"{path}: {field} is {shown(first.get('input'))}; expected {expected}, "
                         f"as batchlab wrote it") from None


def read_steps(path: Path, where: str) -> dict[str, np.ndarray]:
    """A steps.csv as float columns. Tables written before the context features existed
    get them derived from the table itself: after_prefill from the previous row, after_idle
    from the gap before the step (>= IDLE_GAP_S; the first step counts), masked_pairs
    from the prefill tokens (core.features.masked_pairs_estimate)."""
    try:
        rows = list(csv.reader(io.StringIO(text_input.read_text(path))))
    except OSError as e:
        raise ValueError(f"{where}: cannot read {path.name}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{where}: {path.name} is not UTF-8 text; expected a batchlab step table") from None
    if not rows:
        raise ValueError(f"{where}: {path.name} is empty; expected a batchlab step table")
    header = rows[0]
    text_input.check_header(header, f"{where}: {path.name}")
    missing = [c for c in STEP_COLUMNS if c not in header]
    if missing:
        raise ValueError(f"{where}: {path.name} is not a batchlab step table (no column {missing[0]})")
    cols = {}
    for j, name in enumerate(header):
        try:
            cols[name] = np.array([float(r[j]) for r in rows[1:]], dtype=float)
        except (ValueError, IndexError):
            bad = next(i for i, r in enumerate(rows[1:], 2) if len(r) <= j or not _is_float(r[j]))
            raise ValueError(f"{where}: {path.name} row {bad}: column {name} is not a number") from None
        bad_at = np.flatnonzero(~np.isfinite(cols[name]))
        if bad_at.size:  # NaN or inf: no step has it; a table that does was not measured
            row = int(bad_at[0]) + 2
            raise ValueError(f"{where}: {path.name} row {row}: column {name} is "
                             f"{rows[row - 1][j]!r}; expected a finite number")
    neg = np.flatnonzero(cols["duration_s"] < 0)
    if neg.size:
        row = int(neg[0]) + 2
        raise ValueError(f"{where}: {path.name} row {row}: duration_s is {rows[row - 1][header.index('duration_s')]}; "
                         f"expected a duration >= 0")
    if "replica" in cols and cols["replica"].size and np.any(cols["replica"] != cols["replica"][0]):
        raise ValueError(f"{where}: {path.name} has steps of several replicas; expected one engine")
    if "after_prefill" not in cols:
        prefill = cols["num_prefill_seqs"] > 0
        cols["after_prefill"] = np.concatenate(([0.0], prefill[:-1].astype(float)))[:prefill.size]
    if "masked_pairs" not in cols:  # a table written before the feature
        cols["masked_pairs"] = np.array([float(masked_pairs_estimate(int(c), int(n))) for c, n in
                                         zip(cols["prefill_tokens"], cols["num_prefill_seqs"])])
    for windowed, full in zip(WINDOW_FEATURES, ("kv_tokens_read", "attention_pairs")):
        if windowed not in cols:  # a table written before them: a window-free model's
            cols[windowed] = cols[full].copy()
    if PREFILL_PAIRS not in cols:
        # Decodes attend as many pairs as KV slots they read, chunks at least as many slots
        # as their tokens: exact for decode-only steps and first chunks, else a lower bound.
        cols[PREFILL_PAIRS] = np.maximum(
            cols["attention_pairs"] - cols["kv_tokens_read"] + cols["prefill_tokens"], 0.0)
    if SELF_PAIRS not in cols:  # a table written before it: equal chunks (exact for one a step)
        cols[SELF_PAIRS] = np.array([float(self_pairs_estimate(int(c), int(n), int(p))) for c, n, p in
                                     zip(cols["prefill_tokens"], cols["num_prefill_seqs"], cols[PREFILL_PAIRS])])
    if "after_idle" not in cols:
        start, dur = cols["start_s"], cols["duration_s"]
        gap = np.concatenate(([math.inf], start[1:] - (start[:-1] + dur[:-1])))[:start.size]
        cols["after_idle"] = (gap >= IDLE_GAP_S).astype(float)
    return cols


def _is_float(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


@dataclass
class RunFolder:
    """A run found on disk: its folder, how messages name it, its meta; its step table and
    summary read when asked for."""
    folder: Path  # where its tables are
    where: str  # the folder, and the policy where one meta.json holds several
    meta: RunMeta
    key: str = ""  # its policy in the directory's keyed summary.json ("": a run folder of its own)

    def has_steps(self) -> bool:
        return (self.folder / STEPS).is_file()

    def steps(self) -> dict[str, np.ndarray]:
        return read_steps(self.folder / STEPS, self.where)

    def lengths(self) -> tuple[list[int], list[int]]:
        """(prompt_len, output_len) of every request of its requests.csv, by request id."""
        path = self.folder / REQUESTS
        try:
            reader = csv.DictReader(io.StringIO(text_input.read_text(path)))
            text_input.check_header(reader.fieldnames or [], str(path))
            rows = sorted(reader, key=lambda r: int(r["request_id"]))
            return [int(r["prompt_len"]) for r in rows], [int(r["output_len"]) for r in rows]
        except (OSError, KeyError, ValueError) as e:
            if str(e).startswith(str(path)):
                raise
            raise ValueError(f"{path}: cannot read its request_id, prompt_len, output_len ({e})") from None

    def summary(self) -> dict:
        """Its summary, an undefined statistic (null in JSON: TPOT of one-token replies) NaN."""
        if self.key:
            data = read_object(self.folder.parent / SUMMARY, str(self.folder.parent)).get(self.key, {})
        else:
            data = read_object(self.folder / SUMMARY, str(self.folder))
        return {k: math.nan if v is None else v for k, v in data.items()}


def _is_real_dir(name: str) -> bool:
    return name == "real" or (name.startswith("real_") and name[5:].isdigit())


def find_runs(directory: str | Path) -> list[RunFolder]:
    """Every run under `directory`, in any layout of the module docstring; of validate's,
    the real runs (POLICY/real, real_2, ... in that order)."""
    d = Path(directory)
    if not d.is_dir():
        raise ValueError(f"{d}: not a directory; expected a batchlab run's --out directory")
    meta_path = d / META
    if meta_path.is_file():
        meta = read_object(meta_path, str(d))
        if "world" in meta:  # one run's own meta (validate's POLICY/real)
            return [RunFolder(d, str(d), parse_meta(meta, meta_path))]
        runs = [RunFolder(d / p, f"{d} ({p})", parse_meta(m, meta_path, p), p) for p, m in meta.items()
                if isinstance(m, dict) and (d / p).is_dir()]
        if not runs:
            raise ValueError(f"{d}: meta.json names no policy folder; expected a batchlab run's --out")
        return runs
    real = sorted((p for p in d.glob("*/real*") if _is_real_dir(p.name) and (p / META).is_file()),
                  key=lambda p: (p.parent.name, int(p.name.partition("_")[2] or 1)))
    if real:  # validate --out: POLICY/real, and POLICY/real_2 ... with --repeats
        return [RunFolder(p, str(p), parse_meta(read_object(p / META, str(p)), p / META)) for p in real]
    raise ValueError(f"{d}: not a batchlab run (no meta.json, nor POLICY/real/meta.json of validate)")
