"""`batchlab replay --out DIR`: the run folder (read by core/run_folder.py, which wrote it:
meta.json with the model and endpoint, requests.csv with each request's send, first-token
and finish times on the client's clock and its status) and result.json next to it, vLLM's
format, whose itls give the inter-token gaps. Without result.json the gaps are missing
and the end-to-end time stands in for them. A request whose status is not `finished`
(failed, or marked invalid by a later replay) is counted, never used."""
from __future__ import annotations

import csv
import io
from pathlib import Path

from batchlab.calibration.from_replay.observed import Builder, ObservedReplay
from batchlab.core import text_input
from batchlab.core.run_folder import REQUESTS, find_runs

RESULT = "result.json"  # experiments/commands/replay.py


def looks_like(path: Path) -> bool:
    return path.is_dir()


def _rows(path: Path, where: str) -> list[dict]:
    try:
        reader = csv.DictReader(io.StringIO(text_input.read_text(path)))
        text_input.check_header(reader.fieldnames or [], f"{where}: {path.name}")
        rows = list(reader)
    except OSError as e:
        raise ValueError(f"{where}: cannot read {path.name}: {e.strerror}") from None
    need = ("request_id", "arrival_s", "prompt_len", "output_len", "first_token_s", "finish_s", "status")
    missing = [c for c in need if rows and c not in rows[0]]
    if missing or not rows:
        raise ValueError(f"{where}: {path.name} has no {missing[0] if missing else 'rows'}; "
                         f"expected a batchlab replay's request table")
    return rows


def _gaps(directory: Path, where: str) -> list | None:
    p = directory / RESULT
    if not p.is_file():
        return None
    try:
        data = text_input.loads(text_input.read_text(p))
    except (OSError, ValueError) as e:
        raise ValueError(f"{where}: {RESULT} cannot be read ({e})") from None
    itls = data.get("itls") if isinstance(data, dict) else None
    return itls if isinstance(itls, list) else None


def _num(v: str) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _whole(v: str) -> int:
    """A whole number as the table wrote it, else 0 (the row is then dropped as having no
    length): never NaN or inf cast to int, which raised."""
    x = _num(v)
    return int(x) if x is not None and x.is_integer() else 0


def read(path: Path) -> list[ObservedReplay]:
    out = []
    gaps = _gaps(path, str(path))
    for run in find_runs(path):
        meta = run.meta
        endpoint = getattr(meta, "endpoint", None)
        if meta.source != "replay":
            what = f"a {meta.world} run of {meta.source or 'batchlab'}" if meta.world else "not a replay"
            raise ValueError(f"{run.where}: {what}; expected the --out of batchlab replay")
        b = Builder(run.where, "batchlab-replay")
        rows = _rows(run.folder / REQUESTS, run.where)
        for r in rows:
            if r["status"] != "finished":
                b.drop(f"failed ({r['status']})" if r["status"] == "failed" else f"marked {r['status']}")
                continue
            rid = _num(r["request_id"])
            idx = int(rid) if rid is not None and rid.is_integer() else -1  # -1: no gaps of its own
            send, first, end = (_num(r[k]) for k in ("arrival_s", "first_token_s", "finish_s"))
            g = gaps[idx] if gaps is not None and 0 <= idx < len(gaps) else None
            if send is None or first is None or end is None:
                b.drop("missing timings")
                continue
            b.add(send, _whole(r["prompt_len"]), _whole(r["output_len"]), first - send, end - send,
                  g if isinstance(g, list) else None)
        out.append(b.done(meta.model, {"endpoint": endpoint} if endpoint else {},
                          endpoint))
    return out
