"""Raw trace values (CSV strings or JSON values) to numpy columns, vectorised; when a
value is bad, a second pass finds the first offender and names its line."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from core.workload.errors import WorkloadError


def _show(v: object) -> str:
    return repr(v) if isinstance(v, str) else json.dumps(v)


def _fail(path: str | Path, no: int, name: str, v: object, expected: str) -> WorkloadError:
    return WorkloadError(path, no, f"{name} is {_show(v)}; expected {expected}")


def _floats(values: list, nos: list[int], path: str | Path, name: str, expected: str) -> np.ndarray:
    try:
        return np.array(values, dtype=np.float64)
    except (ValueError, TypeError):
        pass
    for v, no in zip(values, nos):
        try:
            if isinstance(v, bool):
                raise TypeError
            float(v)
        except (ValueError, TypeError):
            raise _fail(path, no, name, v, expected) from None
    raise _fail(path, nos[0], name, values[0], expected)  # numpy and float() disagree


def _require(ok: np.ndarray, values: list, nos: list[int], path: str | Path, name: str,
             expected: str) -> None:
    if not ok.all():
        i = int(np.argmin(ok))
        raise _fail(path, nos[i], name, values[i], expected)


def token_counts(values: list, nos: list[int], path: str | Path, name: str) -> np.ndarray:
    """Whole numbers >= 1 (`12` or `12.0`). Zero is rejected: every request has a prompt
    and generates at least one token."""
    expected = "a whole number of tokens >= 1"
    x = _floats(values, nos, path, name, expected)
    _require(np.isfinite(x) & (x >= 1) & (x == np.floor(x)), values, nos, path, name, expected)
    return x.astype(np.int64)


def integers(values: list, nos: list[int], path: str | Path, name: str) -> np.ndarray:
    """Whole numbers of any sign; a missing value (JSON null, empty field) reads as 0."""
    values = [0 if v is None or v == "" else v for v in values]
    expected = "a whole number"
    x = _floats(values, nos, path, name, expected)
    _require(np.isfinite(x) & (x == np.floor(x)), values, nos, path, name, expected)
    return x.astype(np.int64)


def times(values: list, nos: list[int], path: str | Path, name: str, unit: str) -> np.ndarray:
    """Finite, non-negative times in `unit` ("s" or "ms"), returned in seconds."""
    expected = f"a time in {'seconds' if unit == 's' else 'milliseconds'} >= 0"
    x = _floats(values, nos, path, name, expected)
    _require(np.isfinite(x) & (x >= 0), values, nos, path, name, expected)
    return x / 1000.0 if unit == "ms" else x


def datetimes(values: list, nos: list[int], path: str | Path, name: str) -> np.ndarray:
    """ISO date-times (`2023-11-16 18:17:03.9799600`) as datetime64[ns]."""
    expected = "a date-time like 2023-11-16 18:17:03.9799600"
    with warnings.catch_warnings():  # numpy warns that it drops timezone offsets
        warnings.simplefilter("ignore")
        values = [v.strip() if isinstance(v, str) else v for v in values]
        try:
            return np.array(values, dtype="datetime64[ns]")
        except (ValueError, TypeError):
            pass
        for v, no in zip(values, nos):
            try:
                np.datetime64(v, "ns")
            except (ValueError, TypeError):
                raise _fail(path, no, name, v, expected) from None
    raise _fail(path, nos[0], name, values[0], expected)


def hash_lists(values: list, nos: list[int], path: str | Path, name: str, text: bool
               ) -> list[tuple[int, ...]]:
    """Prefix block hashes: a JSON list of integers, or (`text`, CSV) integers separated
    by spaces. Missing reads as no hashes."""
    expected = "a list of integer block hashes"
    out: list[tuple[int, ...]] = []
    for v, no in zip(values, nos):
        if v is None or v == "":
            out.append(())
        elif text:
            try:
                out.append(tuple(int(s) for s in v.split()))
            except ValueError:
                raise _fail(path, no, name, v, "integers separated by spaces") from None
        elif isinstance(v, list) and all(type(h) is int for h in v):
            out.append(tuple(v))
        else:
            raise _fail(path, no, name, v, expected)
    return out
