"""Raw trace values (CSV strings or JSON values) to numpy columns, vectorised; when a
value is bad, a second pass finds the first offender and names its line."""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np

from batchlab.core.checks import MAX_PRIORITY, MAX_SHOWN, MAX_TIME_S, MAX_TOKENS, shown
from batchlab.core.workload.errors import WorkloadError


def _show(v: object) -> str:
    text = repr(v) if isinstance(v, str) else json.dumps(v)
    return text if len(text) <= MAX_SHOWN else shown(v)  # never a 20 MB field whole


def _fail(path: str | Path, no: int, name: str, v: object, expected: str) -> WorkloadError:
    return WorkloadError(path, no, f"{name} is {_show(v)}; expected {expected}")


def _floats(values: list, nos: list[int], path: str | Path, name: str, expected: str) -> np.ndarray:
    # numpy reads a JSON true as 1.0: a boolean is not a number.
    if any(v is True or v is False for v in values):
        i = next(i for i, v in enumerate(values) if v is True or v is False)
        raise _fail(path, nos[i], name, values[i], expected + " (a boolean is not a number)")
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
    """Whole numbers from 1 to MAX_TOKENS (`12` or `12.0`). Zero is rejected: every
    request has a prompt and generates at least one token."""
    expected = f"a whole number of tokens >= 1 and <= {MAX_TOKENS:,}"
    x = _floats(values, nos, path, name, expected)
    _require(np.isfinite(x) & (x >= 1) & (x <= MAX_TOKENS) & (x == np.floor(x)), values, nos,
             path, name, expected)
    return x.astype(np.int64)


def integers(values: list, nos: list[int], path: str | Path, name: str) -> np.ndarray:
    """Whole numbers of either sign up to 2**53 (exact in float64, which they are read
    as); a missing value (JSON null, empty field) reads as 0."""
    values = [0 if v is None or v == "" else v for v in values]
    expected = "a whole number from -2**53 to 2**53"
    x = _floats(values, nos, path, name, expected)
    _require(np.isfinite(x) & (np.abs(x) <= MAX_PRIORITY) & (x == np.floor(x)), values, nos,
             path, name, expected)
    return x.astype(np.int64)


def times(values: list, nos: list[int], path: str | Path, name: str, unit: str) -> np.ndarray:
    """Times in `unit` ("s" or "ms") from 0 to below MAX_TIME_S (core/checks.py: step
    durations must stay representable), returned in seconds."""
    top = MAX_TIME_S if unit == "s" else MAX_TIME_S * 1000
    expected = f"a time in {'seconds' if unit == 's' else 'milliseconds'} >= 0 and < {top:g}"
    x = _floats(values, nos, path, name, expected)
    _require(np.isfinite(x) & (x >= 0) & (x < top), values, nos, path, name, expected)
    return x / 1000.0 if unit == "ms" else x


def datetimes(values: list, nos: list[int], path: str | Path, name: str) -> np.ndarray:
    """ISO date-times (`2023-11-16 18:17:03.9799600`) as datetime64[ns]."""
    expected = "a date-time like 2023-11-16 18:17:03.9799600"
    with warnings.catch_warnings():  # numpy warns that it drops timezone offsets
        warnings.simplefilter("ignore")
        values = [v.strip() if isinstance(v, str) else v for v in values]
        # Four digits and a dash start a date and no bare number: only the others are
        # matched against _NUMBER (a regex match costs ~20x the test).
        for i in [i for i, v in enumerate(values) if isinstance(v, str)
                  and not (v[4:5] == "-" and v[:4].isdigit())]:
            v, no = values[i], nos[i]
            if _NUMBER.fullmatch(v):
                # numpy reads "1700000000" as the year 1700000000: 5 s gaps become 5 years.
                raise _fail(path, no, name, v, expected + "; a bare number (epoch seconds "
                            "or milliseconds?) is not read as a time: convert the trace to "
                            "the batchlab format, whose arrival_s is seconds") from None
        try:
            ts = np.array(values, dtype="datetime64[ns]")
        except (ValueError, TypeError):
            ts = None
        if ts is not None:
            # Outside 1678-2262 nanoseconds wrap around silently; days do not.
            days = np.array(values, dtype="datetime64[D]")
            wrapped = ts.astype("datetime64[D]") != days
            if wrapped.any():
                i = int(np.argmax(wrapped))
                raise _fail(path, nos[i], name, values[i], "a date-time between the years "
                            "1678 and 2262")
            return ts
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
                h = tuple(int(s) for s in v.split())
            except ValueError:
                raise _fail(path, no, name, v, "integers separated by spaces") from None
            if not all(_INT64_MIN <= x <= _INT64_MAX for x in h):
                raise _fail(path, no, name, v, "integers within int64")
            out.append(h)
        elif isinstance(v, list) and all(type(h) is int and _INT64_MIN <= h <= _INT64_MAX
                                         for h in v):
            out.append(tuple(v))
        else:
            raise _fail(path, no, name, v, expected + " within int64")
    return out


_INT64_MIN, _INT64_MAX = -2**63, 2**63 - 1
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
