"""A small markdown report writer: headings, paragraphs, tables, images, and claims
stated next to what was measured."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence


def fmt(value: Any, spec: str = "{:.1f}") -> str:
    """A table cell: '-' for missing or NaN values."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return spec.format(value) if isinstance(value, (int, float)) else str(value)


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
        """Cells are used as given (format them with fmt); first column left-aligned,
        the rest right-aligned (numbers)."""
        head = "| " + " | ".join(headers) + " |"
        rule = "|" + "|".join([":---"] + ["---:"] * (len(headers) - 1)) + "|"
        body = ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        self.parts.append("\n".join([head, rule, *body]) + "\n")
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
        p.write_text(self.text())
        return p
