"""Input text read one way, whoever reads it: a UTF-8 byte-order mark is dropped, CR-LF
and CR-only line endings read as LF, and a CSV header or a JSON object that holds a
name twice is refused naming the name and where (never first-wins or last-wins)."""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BOM = "\ufeff"


def normalise(text: str) -> str:
    """Text with its byte-order mark dropped and every line ending as LF."""
    return text.removeprefix(BOM).replace("\r\n", "\n").replace("\r", "\n")


def read_text(path: str | Path) -> str:
    """A UTF-8 text file, normalised (OSError, UnicodeDecodeError as open() raises them)."""
    return normalise(Path(path).read_bytes().decode("utf-8"))


def duplicate(names: Sequence[str]) -> tuple[str, int, int] | None:
    """The first name given twice and its two 1-based positions, or None."""
    first: dict[str, int] = {}
    for i, n in enumerate(names, 1):
        if n in first:
            return n, first[n], i
        first[n] = i
    return None


def check_header(names: Sequence[str], where: str) -> None:
    """ValueError naming the first column a CSV header holds twice."""
    dup = duplicate(names)
    if dup:
        name, a, b = dup
        raise ValueError(f"{where}: column {name!r} appears twice in the header (columns {a} "
                         f"and {b}); expected each column once")


class DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(f"key {key!r} appears twice in one object; expected each key once")
        self.key = key


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise DuplicateKey(duplicate([k for k, _ in pairs])[0])
    return out


def loads(text: str) -> Any:
    """json.loads refusing an object with a key twice (DuplicateKey, a ValueError)."""
    return json.loads(text, object_pairs_hook=_unique_object)
