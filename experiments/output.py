"""Writing results: per policy a requests.csv and a steps.csv, and one summary.json
keyed by policy, rewritten after each policy so an interrupt keeps what finished."""
from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from batchlab.core.result import RunResult
from batchlab.experiments.errors import UserError


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
    with open(path, "w", newline="") as f:
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


# What a run writes per policy folder; only these are ever removed.
TABLES = ("requests.csv", "steps.csv")


def check_out_dir(out_dir: str | Path) -> None:
    """--out names a directory, or nothing yet: checked before any work is done."""
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise UserError(f"--out {out_dir}: is a file; expected a directory (created if missing)")


def make_out_dir(out_dir: str | Path, config: dict[str, Any], clear: bool = True) -> Path:
    """Create `out_dir`, clear an earlier run's results from it (clear) and write
    config.json; a one-line error if it cannot be written."""
    check_out_dir(out_dir)
    d = Path(out_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
        if clear:
            remove_earlier_results(d)
        (d / "config.json").write_text(to_json(config) + "\n")
    except OSError as e:
        raise UserError(f"--out {out_dir}: cannot write there: {e.strerror} ({e.filename})") from None
    return d


class ResultWriter:
    def __init__(self, out_dir: str | Path, config: dict[str, Any]) -> None:
        """Done before anything is simulated or served (see make_out_dir)."""
        self.dir = make_out_dir(out_dir, config)
        self.summaries: dict[str, dict] = {}
        self.meta: dict[str, dict] = {}

    def add(self, name: str, result: RunResult, summary: dict[str, float]) -> None:
        sub = self.dir / name
        sub.mkdir(exist_ok=True)
        write_table(sub / TABLES[0], with_latencies(result.requests))
        if result.steps is not None:
            write_table(sub / TABLES[1], result.steps)
        self.summaries[name] = summary
        self.meta[name] = result.meta
        (self.dir / "summary.json").write_text(to_json(self.summaries) + "\n")
        (self.dir / "meta.json").write_text(to_json(self.meta) + "\n")


def remove_earlier_results(out: Path) -> None:
    """A reused --out directory must not mix two runs (a `chunked/` left from an earlier
    run beside a summary listing only `static`). If its meta.json is one batchlab wrote
    (a run's meta per policy, each saying its "world"), the policies it lists lose their
    tables (and their folders, if that empties them), and meta.json and summary.json go;
    anything else stays."""
    try:
        meta = json.loads((out / "meta.json").read_text())
    except (OSError, ValueError):  # absent, or not JSON: not ours
        return
    if not (isinstance(meta, dict) and meta
            and all(isinstance(m, dict) and m.get("world") in ("sim", "real") for m in meta.values())):
        return  # someone else's meta.json
    # Only plain folder names: never follow a key such as "../x" out of `out`.
    policies = {k for k in meta if k not in ("", ".", "..") and Path(k).name == k}
    for name in ("meta.json", "summary.json"):
        (out / name).unlink(missing_ok=True)
    for policy in sorted(policies):
        folder = out / policy
        if folder.is_symlink() or not folder.is_dir():
            continue  # we only ever write real folders
        for table in TABLES:
            (folder / table).unlink(missing_ok=True)
        try:
            folder.rmdir()
        except OSError:
            pass  # absent, or holds files of someone else's: left as it is


def profile_out_path(args: argparse.Namespace, default: str | None = None) -> Path:
    """Where `calibrate` writes its profile: --out, or `default` (MODEL-DEVICE.json); a
    one-line error where it cannot go."""
    if args.out:
        out = Path(args.out)
    else:
        out = Path(default or f"{Path(args.model.rstrip('/')).name}-{args.device.replace(':', '')}.json")
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: directory {out.parent} does not exist")
    if out.is_dir():
        raise UserError(f"--out {out}: is a directory; give a file name")
    return out
