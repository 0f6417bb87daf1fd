"""Reading served-engine benchmark results: one row a configuration (a model on `tp` GPUs,
a closed loop of `concurrency` users, every request `isl` prompt and `osl` output tokens)
with the mean TTFT and TPOT the engine measured. The layout is the shared file's
(../shared/served-benchmarks/vllm_train.csv, from AIConfigurator's silicon samples); every
problem is one line naming the file, the line and the column."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from batchlab.calibration.operators.tables import (CONFLICT_RATIO, OperatorTableError, count, read_rows, time_ms,
                                                   where)

REQUIRED = ("model_path", "system", "precision", "isl", "osl", "batch_size", "tp_size",
            "silicon_ttft_ms", "silicon_tpot_ms")

# The benchmark's names for the models and GPUs, as batchlab's presets. A model the
# presets do not hold cannot be priced: it is refused, named.
MODELS = {"Qwen/Qwen3-32B": "qwen3-32b", "Qwen/Qwen3-32B-FP8": "qwen3-32b",
          "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
          "openai/gpt-oss-120b": "gpt-oss-120b", "openai/gpt-oss-20b": "gpt-oss-20b"}
SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200", "a100_sxm": "a100-80gb"}
# The benchmark's weight precision as the simulator's weight dtype; "" is the checkpoint's
# own (bf16 for a dense model; the preset's for one shipped quantised, e.g. gpt-oss's mxfp4).
PRECISIONS = {"": None, "bf16": "bf16", "fp8": "fp8", "fp4": None}
# No engine runs more than this many users' requests at once on one GPU set; a count
# past it is a typo, not a benchmark.
MAX_CONCURRENCY = 65536
# A mean TTFT this many reply generations long: the server queued most users (the shared
# file's gpt-oss rows at 512 users wait 3.8-4.4 generations, every other row under 1.05).
QUEUED_TTFT_SHARE = 2.0
MAX_TOKENS = 1 << 21


@dataclass(frozen=True)
class BenchmarkRow:
    line: int  # in its file, for messages
    model_id: str  # as the benchmark names it
    model: str  # batchlab's preset
    gpu: str  # batchlab's hardware preset
    dtype: str | None  # weights; None: the preset's own
    precision: str  # as the benchmark names it
    tp: int
    concurrency: int
    isl: int
    osl: int
    ttft_s: float  # measured means
    tpot_s: float
    engine_version: str
    source: str = ""  # the file it came from where that file is the row's own (vllm bench serve's JSON)

    @property
    def place(self) -> str:
        """Where it was read, for messages."""
        return self.source or f"line {self.line}"

    @property
    def curve(self) -> tuple:
        """The load curve this row is a point of: everything but the concurrency."""
        return (self.model, self.gpu, self.precision, self.tp, self.isl, self.osl)

    @property
    def group(self) -> tuple[str, str, int]:
        return (self.model, self.gpu, self.tp)

    @property
    def queued_by_server(self) -> bool:
        """The server ran far fewer of the users at once than there were: a request waited
        longer than QUEUED_TTFT_SHARE generations of a reply ((osl - 1) x TPOT) before its
        first token, so a setting the file does not state (max_num_seqs, the KV pool) held
        the rest back, and its TPOT is that of the few running."""
        return self.osl > 1 and self.ttft_s > QUEUED_TTFT_SHARE * (self.osl - 1) * self.tpot_s

    def describe(self) -> str:
        prec = f" {self.precision}" if self.precision else ""
        return f"{self.model}{prec} on {self.tp} x {self.gpu}, {self.concurrency} users, {self.isl}/{self.osl} tokens"


def _known(path: Path, line: int, column: str, value: str, table: dict) -> str | None:
    if value not in table:
        raise OperatorTableError(f"{where(path, line, column)}: {value!r} is not one batchlab can price "
                                 f"(known: {', '.join(k or repr('') for k in table)})")
    return table[value]


def read_benchmarks(path: str | Path) -> list[BenchmarkRow]:
    """Every row of `path`; a ValueError of one line for the first bad cell, or for two rows
    of the same configuration."""
    path = Path(path)
    if not path.is_file():
        raise OperatorTableError(f"{path}: no such file (a served benchmark table, as "
                                 f"../shared/served-benchmarks/vllm_train.csv)")
    seen: dict[tuple, BenchmarkRow] = {}
    for line, r in read_rows(path, REQUIRED, "served benchmark table"):
        if r.get("backend", "vllm") not in ("vllm", ""):
            raise OperatorTableError(f"{where(path, line, 'backend')}: {r['backend']!r}; only vLLM's "
                                     f"results are read (its engine is the one simulated)")
        row = BenchmarkRow(
            line=line, model_id=r["model_path"], model=_known(path, line, "model_path", r["model_path"], MODELS),
            gpu=_known(path, line, "system", r["system"], SYSTEMS),
            dtype=_known(path, line, "precision", r["precision"], PRECISIONS), precision=r["precision"],
            tp=count(path, line, r, "tp_size"), concurrency=count(path, line, r, "batch_size"),
            isl=count(path, line, r, "isl"), osl=count(path, line, r, "osl"),
            ttft_s=time_ms(path, line, r, "silicon_ttft_ms"), tpot_s=time_ms(path, line, r, "silicon_tpot_ms"),
            engine_version=r.get("backend_version") or "")
        for column, v, most in (("batch_size", row.concurrency, MAX_CONCURRENCY), ("isl", row.isl, MAX_TOKENS),
                                ("osl", row.osl, MAX_TOKENS), ("tp_size", row.tp, 64)):
            if v > most:
                raise OperatorTableError(f"{where(path, line, column)}: {v} is past {most}, not a benchmark")
        if r.get("pp_size", "1") not in ("1", ""):
            raise OperatorTableError(f"{where(path, line, 'pp_size')}: {r['pp_size']!r}; only pp 1 is read")
        key = (row.curve, row.concurrency)
        if key in seen:  # a repeat: kept once, averaged, where it agrees
            seen[key] = _repeat(path, seen[key], row)
        else:
            seen[key] = row
    if not seen:
        raise OperatorTableError(f"{path}: a header and no rows")
    return list(seen.values())


def _repeat(path: Path, first: BenchmarkRow, again: BenchmarkRow) -> BenchmarkRow:
    """One row for two of the same configuration (the shared file holds copies): their
    mean, or a one-line error where they are measurements of something else."""
    for column, a, b in (("silicon_ttft_ms", first.ttft_s, again.ttft_s), ("silicon_tpot_ms", first.tpot_s, again.tpot_s)):
        if max(a, b) > CONFLICT_RATIO * min(a, b):
            raise OperatorTableError(
                f"{where(path, again.line, column)}: {b * 1e3:.4g} ms conflicts with {a * 1e3:.4g} ms for the same "
                f"configuration on line {first.line} ({first.describe()}; repeats may differ by x{CONFLICT_RATIO} at most)")
    return dataclasses.replace(first, ttft_s=(first.ttft_s + again.ttft_s) / 2, tpot_s=(first.tpot_s + again.tpot_s) / 2)


def in_regime(rows: list[BenchmarkRow]) -> tuple[list[BenchmarkRow], list[BenchmarkRow]]:
    """(the rows a default engine's settings reproduce, those queued by the server's own
    unstated settings: set apart from fits and judgements, and said so)."""
    return [r for r in rows if not r.queued_by_server], [r for r in rows if r.queued_by_server]


def set_apart_line(apart: list[BenchmarkRow]) -> str:
    """What was set apart and why, in one line (empty: nothing)."""
    if not apart:
        return ""
    return (f"{len(apart)} configurations set apart: their mean TTFT is over {QUEUED_TTFT_SHARE:g} reply "
            f"generations ((osl - 1) x TPOT), so the server ran far fewer of the users at once than "
            f"vLLM's default max_num_seqs and KV pool would (settings the file does not state): "
            f"{', '.join(sorted({f'{r.model} at {r.concurrency} users' for r in apart}))}")
