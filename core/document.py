"""Reading a batchlab JSON document (a calibration profile, a GPU profile): the file's text,
then the JSON object with its "format" checked, each failure a one-line error of the
caller's own type naming the file. Text is read one way (core/text_input.py: a BOM
dropped, a key given twice refused)."""
from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Callable
from typing import Any

from batchlab.core import text_input


def read_document(path: Path, what: str, error: type[ValueError], choices: Callable[[], str]) -> str:
    """The text of `path`, a `what` ("profile"); choices() says, where it is not found,
    what may be given instead (asked only then: it may list the shipped ones)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        raise error(f"{path}: {what} not found ({choices()})") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not a JSON document (binary data)") from None
    except OSError as e:
        raise error(f"{path}: cannot read {what}: {e.strerror}") from None


def parse_document(text: str, where: str, what: str, fmt: str, error: type[ValueError]) -> dict[str, Any]:
    """The JSON object of a batchlab `what` whose "format" is `fmt`."""
    try:
        data = text_input.loads(text_input.normalise(text))
    except json.JSONDecodeError as e:
        raise error(f"{where}: not a JSON document ({e.msg} at line {e.lineno})") from None
    except text_input.DuplicateKey as e:
        raise error(f"{where}: {e}") from None
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise error(f"{where}: not a batchlab {what} (no \"format\": \"{fmt}\")")
    return data
