"""Errors a user can fix: printed as one line, exit code 2, never a traceback."""
from __future__ import annotations

import sys

from pydantic import ValidationError

from batchlab.core.checks import shown


class UserError(Exception):
    """Bad input: a file, a field, an option. The message names it and what was expected."""


def warn(message: str) -> None:
    """A one-line warning on stderr: the run goes on."""
    print(f"batchlab: warning: {message}", file=sys.stderr)


def describe_validation_error(err: ValidationError, where: str = "") -> str:
    """One line per pydantic error is too much for a CLI: name the first field, the
    problem and the value given; count the rest."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    loc = f"{loc}: " if loc else ""  # a check across sections names its fields itself
    msg = first["msg"].removeprefix("Value error, ")
    given = first.get("input")
    value = "" if isinstance(given, dict) or given is None else f" (got {shown(given)})"
    if value and first["type"].endswith("_type"):  # strict: say what type was given
        kind = _TYPE_NAMES.get(type(given), type(given).__name__)
        value = f" (got {shown(given)}, {'an' if kind[0] in 'aeiou' else 'a'} {kind})"
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    prefix = f"{where}: " if where else ""
    return f"{prefix}{loc}{msg}{value}{more}"


# How a TOML value's Python type reads in an error (TOML: true, "20", 1.5, [..]).
_TYPE_NAMES = {bool: "boolean", str: "string", int: "integer", float: "float", list: "list"}
