"""A small markdown report writer: headings, paragraphs, tables, images, and claims
stated next to what was measured."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence
from batchlab.core import atomic


def fmt(value: Any, spec: str = "{:.1f}") -> str:
    """A table cell: '-' for missing or NaN values."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return spec.format(value) if isinstance(value, (int, float)) else str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table. Cells are used as given (format them with fmt); first column
    left-aligned, the rest right-aligned (numbers)."""
    head = "| " + " | ".join(headers) + " |"
    rule = "|" + "|".join([":---"] + ["---:"] * (len(headers) - 1)) + "|"
    body = ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join([head, rule, *body])


Column = tuple[str, "str | Callable[[Any], Any]", "str | None"]


def table_of(items: Iterable[Any], columns: Sequence[Column]) -> str:
    """A markdown table with one row per item. A column: its header, the item's key (or
    a function of the item), and the fmt spec of its cells (None: the value as it is)."""
    def cell(item: Any, get: str | Callable[[Any], Any], spec: str | None) -> Any:
        value = get(item) if callable(get) else item[get]
        return value if spec is None else fmt(value, spec)
    return table([c[0] for c in columns], [[cell(i, get, spec) for _, get, spec in columns]
                                           for i in items])


class Report:
    def __init__(self, title: str) -> None:
        self.parts: list[str] = [f"# {title}\n"]

    def heading(self, text: str, level: int = 2) -> "Report":
        self.parts.append(f"{'#' * level} {text}\n")
        return self

    def para(self, text: str) -> "Report":
        self.parts.append(text.strip() + "\n")
        return self

    def bullets(self, items: Sequence[str]) -> "Report":
        self.parts.append("\n".join(f"- {i}" for i in items) + "\n")
        return self

    def code(self, text: str, lang: str = "") -> "Report":
        self.parts.append(f"```{lang}\n{text.rstrip()}\n```\n")
        return self

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> "Report":
        self.parts.append(table(headers, rows) + "\n")
        return self

    def image(self, filename: str, alt: str) -> "Report":
        self.parts.append(f"![{alt}]({filename})\n")
        return self

    def claim(self, claim: str, measured: str, note: str = "") -> "Report":
        """The claim, the measured figure next to it, and why they differ (if they do)."""
        lines = [f"> **Claim:** {claim}", ">", f"> **Measured:** {measured}"]
        if note:
            lines += [">", f"> **Why it differs / caveats:** {note}"]
        self.parts.append("\n".join(lines) + "\n")
        return self

    def text(self) -> str:
        return "\n".join(self.parts)

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        atomic.write_text(p, self.text())
        return p
