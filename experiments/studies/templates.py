"""A study's prose: templates/NAME.md, markdown in named sections with {placeholders}
filled from the study's result (str.format syntax: `{rows[static][slot_utilization]:.1%}`).

A section starts with a line `<!-- name -->` and runs to the next one (what comes before
the first is the file's own notes). Paragraphs may be wrapped in the file: the lines of
a paragraph are joined with a space, except a line starting with `|`, `#`, `![`, `- ` or
`>`, which starts a new line (tables, headings, images, lists, the claim's quote).
Paragraphs are separated by one blank line, and one that fills to nothing is left out,
so an optional part is a placeholder alone in its paragraph, given ""."""
from __future__ import annotations

import re
import string
from functools import lru_cache
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).with_name("templates")
_SECTION = re.compile(r"^<!-- ([\w-]+) -->[ \t]*$", re.M)
_OWN_LINE = ("|", "#", "![", "- ", ">")


class _Formatter(string.Formatter):
    def format_field(self, value: Any, spec: str) -> str:
        # A figure read back from study.json is null where it was NaN (or not measured):
        # shown as in the tables, where the live value would have been formatted.
        if value is None and spec:
            return "-"
        return super().format_field(value, spec)


_FORMAT = _Formatter()


def _unwrap(paragraph: str) -> str:
    lines: list[str] = []
    for line in paragraph.splitlines():
        line = line.rstrip()
        if lines and not line.startswith(_OWN_LINE):
            lines[-1] += " " + line.lstrip()
        else:
            lines.append(line)
    return "\n".join(lines)


class Template:
    def __init__(self, name: str, text: str) -> None:
        self.name = name
        parts = _SECTION.split(text)
        self.sections: dict[str, list[str]] = {
            key: [_unwrap(p) for p in re.split(r"\n[ \t]*\n", body.strip("\n")) if p.strip()]
            for key, body in zip(parts[1::2], parts[2::2])}

    def __call__(self, section: str, **values: Any) -> str:
        """The section's paragraphs filled with values, empty ones left out."""
        if section not in self.sections:
            raise KeyError(f"{FOLDER / self.name}.md: no section <!-- {section} -->")
        filled = (_FORMAT.vformat(p, (), values) for p in self.sections[section])
        return "\n\n".join(p for p in filled if p)


@lru_cache(maxsize=None)
def template(name: str) -> Template:
    """templates/NAME.md, read once."""
    return Template(name, (FOLDER / f"{name}.md").read_text())
