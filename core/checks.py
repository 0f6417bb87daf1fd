"""The numbers batchlab accepts: one set of constrained types, used by every pydantic
model that reads a TOML config, the command line or a profile, and one set of bounds,
used by the trace parsers. Each bound is documented here, once, with why.

- A boolean is not a number and a string is not a number (even "20").
- Every number is finite, except a rate, where inf means "all at once".
- Times (arrivals, windows, jitter, think time, delays) are below MAX_TIME_S = 1e8 s,
  about 3.2 years: float64 then resolves 15 ns at the end of a run, so a step of
  10 us keeps three significant digits when added to the clock. At 1e20 s a step of
  1 ms adds nothing and every latency reads 0.
- A finite rate is at least MIN_RATE = 1e-6 req/s (one request in 11.6 days): below it
  1/rate overflows long before anything is simulated (1e-320 req/s gives inf gaps).
- Token counts (prompt, output, context, block size, step budget) are at most
  MAX_TOKENS = 1e9, a hundred times the longest context of any model; sums of a
  billion such requests stay far inside int64.
- Other counts (seats, KV blocks, replicas, requests) are at most MAX_COUNT = 2**53,
  the integers float64 holds exactly; what a run can hold in memory is checked apart
  (core/sizes.py), with the figure it would need.
"""
from __future__ import annotations

import math
import re
from numbers import Real
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ValidationError
from pydantic_core import PydanticCustomError

MAX_TIME_S = 1e8
MIN_RATE = 1e-6
MAX_TOKENS = 10**9
MAX_COUNT = 2**53
MAX_BLOCK_SIZE = 2**16  # tokens a KV block (BlockSize below)
MAX_SEED = 2**63 - 1
MAX_PRIORITY = 2**53  # |priority|: integers float64 holds exactly (traces parse as float)
MAX_SHOWN = 60  # characters of a bad value an error message repeats


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """repr(value), cut to `limit` characters: an error never echoes a 20 MB field."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}... ({len(text)} characters)"


def number(kind: type):
    """A before-validator: lax pydantic (profiles, model configs) would read True as 1
    and "20" as 20; a boolean or a string is not a number anywhere."""
    label = "a valid integer" if kind is int else "a valid number"

    def check(v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, Real):
            raise PydanticCustomError(f"{kind.__name__}_type", f"Input should be {label}")
        return v
    return BeforeValidator(check)


def _range(lo: float | None, hi: float | None, *, lo_open: bool = False, inf_ok: bool = False,
           what: str = "a number"):
    """An after-validator: finite (or inf where inf_ok), within [lo, hi] (lo excluded
    when lo_open), with the expectation spelt out."""
    def check(v):
        ok = not math.isnan(v) and (math.isfinite(v) or (inf_ok and v > 0))
        if ok and math.isfinite(v):
            ok = ((lo is None or (v > lo if lo_open else v >= lo))
                  and (hi is None or v <= hi))
        if not ok:
            raise ValueError(f"expected {what}")
        return v
    return AfterValidator(check)


def _num(kind: type, lo, hi, what: str, **kw) -> Any:
    return Annotated[kind, number(kind), _range(lo, hi, what=what, **kw)]


# Times in seconds.
Seconds = _num(float, 0, MAX_TIME_S, f"a finite time in seconds from 0 to {MAX_TIME_S:g}")
PositiveSeconds = _num(float, 0, MAX_TIME_S, f"a finite time in seconds > 0 and <= {MAX_TIME_S:g}",
                       lo_open=True)
# Requests per second; inf: everything at t = 0.
Rate = _num(float, MIN_RATE, None, f"a rate in requests/s >= {MIN_RATE:g} (or inf: all at once)",
            inf_ok=True)
# Plain finite numbers.
Finite = _num(float, None, None, "a finite number")
NonNegative = _num(float, 0, None, "a finite number >= 0")
Positive = _num(float, 0, None, "a finite number > 0", lo_open=True)
Fraction = _num(float, 0, 1, "a fraction > 0 and <= 1", lo_open=True)
# Achieved share of a datasheet figure: below 1% it is not a machine, and steps priced
# at 1e-233 of the bandwidth overflow every statistic.
Efficiency = _num(float, 0.01, 1, "a share of the datasheet from 0.01 to 1")
# Whole numbers.
Tokens = _num(int, 1, MAX_TOKENS, f"a whole number of tokens from 1 to {MAX_TOKENS:,}")
Count = _num(int, 1, MAX_COUNT, "a whole number from 1 to 2**53")
# Tokens a KV block: engines use 1 to a few hundred. The simulator's decode groups keep a
# counter per position in a block, so a block of millions of tokens cost seconds and
# gigabytes a run (a property test drew 2**24 and held 18 GB).
BlockSize = _num(int, 1, MAX_BLOCK_SIZE, f"a whole number of tokens a KV block from 1 to {MAX_BLOCK_SIZE:,}")
Seed = _num(int, 0, MAX_SEED, "a whole number from 0 to 2**63-1")
# Gamma shape of generated gaps: outside [1e-3, 1e3] the gaps' scale 1/(rate * shape)
# overflows at small rates, or the arrivals are a clock (shape 1e3 is already one).
Burstiness = _num(float, 1e-3, 1e3, "a Gamma shape from 0.001 to 1000 (1: Poisson)")
# Lognormal spread of log-lengths: e**10 is already a factor of 22,000 either way.
Sigma = _num(float, 0, 10, "a standard deviation of log-length from 0 to 10")
LengthMean = _num(float, 0, MAX_TOKENS, f"a mean length in tokens > 0 and <= {MAX_TOKENS:,}",
                  lo_open=True)


_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "t": 1e12, "tb": 1e12}
MAX_MEMORY_BYTES = 2.0**60  # an exabyte: far beyond any machine, far inside int64


def parse_memory(value: str | int | float) -> tuple[str, float]:
    """A KV budget: a fraction of free memory ('0.3', 0.3) or a size with a unit
    ('2GiB', '512MB', '2e9B'). Returns ('fraction', f) or ('bytes', n). A unitless
    string above 1 is refused: '2.0' read as 2 bytes is never what was meant (a Python
    number above 1 is a size in bytes)."""
    if isinstance(value, bool):
        raise ValueError(f"memory budget {value!r}: expected a fraction (0.3) or a size (2GiB)")
    if isinstance(value, (int, float)):
        # From Python (not the command line or TOML): a number above 1 is bytes.
        num, unit = float(value), "" if value <= 1 else "b"
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*", str(value))
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(f"memory budget {shown(value)}: expected a fraction (0.3) or a "
                             f"size (2GiB, 512MB)")
        num, unit = float(m.group(1)), m.group(2).lower()
    if not math.isfinite(num) or num <= 0:
        raise ValueError(f"memory budget must be a finite number > 0, got {shown(value)}")
    if unit == "":
        if num > 1:
            raise ValueError(f"memory budget {shown(value)}: a number without a unit is a "
                             f"fraction of free memory, from 0 to 1; give a size with a unit "
                             f"(2GiB, 512MB)")
        return "fraction", num
    size = num * _UNITS[unit]
    if size > MAX_MEMORY_BYTES:
        raise ValueError(f"memory budget {shown(value)}: expected at most 1 EiB")
    return "bytes", size


def _memory(v: Any) -> Any:
    parse_memory(v)
    return v


# [model] kv_memory / --kv-memory: checked where it enters, not after a model loads.
KVMemory = Annotated[str, AfterValidator(_memory)]


def field_error(e: ValidationError, what: str) -> str:
    """A pydantic error of a document as one line: `bad WHAT LOC: problem (got value)`,
    the first error named and the rest counted."""
    first = e.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "document"
    more = f" (+{e.error_count() - 1} more)" if e.error_count() > 1 else ""
    given = first.get("input")
    got = "" if isinstance(given, (dict, list)) or first["type"] == "missing" else f" (got {shown(given)})"
    return f"bad {what} {loc}: {first['msg'].removeprefix('Value error, ')}{got}{more}"

