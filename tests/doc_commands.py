"""The `batchlab ...` commands printed in README.md and docs/*.md: each with where it is
printed, its words (a continued line joined, a trailing comment or `&` dropped), and
whether it is a synopsis (placeholders such as SOURCE, [options] or a|b) rather than a
command to run."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER = re.compile(r"\[|\||\b(SOURCE|FILE|NAME|DIR|URL|OUT|KEY|MS|ADDRESS)\b|\bP\.json\b|\.\.\.")


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    text: str  # as printed, continuation lines joined, comment and `&` dropped
    background: bool  # printed with a trailing `&`

    @property
    def words(self) -> list[str]:
        return shlex.split(self.text)

    @property
    def synopsis(self) -> bool:
        return bool(PLACEHOLDER.search(self.text))

    @property
    def command(self) -> str:
        return self.words[1]

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"


def _strip_comment(line: str) -> str:
    # a comment starts at " #" outside quotes; documented commands quote nothing with '#'
    return re.split(r"\s+#\s", line, maxsplit=1)[0].rstrip()


def commands_in(path: Path) -> list[DocCommand]:
    out: list[DocCommand] = []
    fenced, pending, start = False, "", 0
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        if raw.lstrip().startswith("```"):
            fenced, pending = not fenced, ""
            continue
        if not fenced:
            continue
        line = raw.strip()
        if not pending and not line.startswith("batchlab "):
            continue
        if not pending:
            start = n
        line = _strip_comment(line)
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        text = (pending + line).strip()
        pending = ""
        background = text.endswith("&")
        out.append(DocCommand(f"{path.relative_to(ROOT)}:{start}", text.rstrip("&").strip(), background))
    return out


def documented_commands() -> list[DocCommand]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [c for f in files for c in commands_in(f)]


# -- how a documented command is run by the tests ------------------------------------------
TORCH_COMMANDS = {"run", "calibrate", "validate", "serve", "replay"}
TRACES = re.compile(r"--workload (azure_conv|azure_code|mooncake)\b|\bworkload stats (azure_code|azure_conv|mooncake)\b")
# Inputs no earlier documented command makes here: a GPU, a user's own files.
ELSEWHERE = re.compile(r"--device cuda|my-llama-dir|small-a100\.json|exp\.toml|P\.json|out/run1")
# Files an earlier documented command makes on the torch backend.
MADE_ON_TORCH = re.compile(r"batchlab-small-cpu\.json|tiny\.json|probes/")


@dataclass(frozen=True)
class Plan:
    argv: list[str]  # the printed words (without `batchlab`), then the shortening
    shortened: list[str]  # the words appended: a smaller window, fewer requests, one worker
    needs: frozenset[str]  # "torch", "traces", "shared", "server", "elsewhere"


def plan(c: DocCommand) -> Plan:
    """The printed command with, appended, what keeps a test short (a later option wins
    over the printed one): a 300 s window of a trace (of the Azure conversation trace, the
    window holding its one conversation longer than Llama-3's context), a 120 s busiest
    window, one worker, the studies' --small size, a quick calibration grid, fewer requests
    to validate or replay."""
    t, extra, needs = c.text, [], set()
    on_torch = c.command in TORCH_COMMANDS and "--from-operators" not in t
    if on_torch or "--backend" in t or " fidelity" in t or MADE_ON_TORCH.search(t):
        needs.add("torch")
    if ELSEWHERE.search(t):
        needs.add("elsewhere")
    if "http://127.0.0.1:8000" in t or c.command == "serve":
        needs.add("server")
    if "../shared/" in t:  # the shared data beside the repository (operator tables)
        needs.add("shared")
    if TRACES.search(t):
        needs.add("traces")
        if "--busiest-window" in t:
            extra += ["--busiest-window", "120"]
        elif "--window-duration" not in t and "--num-requests" not in t:
            extra += (["--window-start", "1000"] if "azure_conv" in t else []) + ["--window-duration", "300"]
    if c.command in ("capacity", "sweep"):
        extra += ["--workers", "1"]
    if c.command == "experiment" and "--small" not in t and "--list" not in t:
        extra.append("--small")
    if c.command == "calibrate" and not re.search(r"--from-|--endpoint", t):
        extra += ["--grid", "quick"]
    # not `run`: the README refines a profile on what it served (enough idle gaps to fit)
    if c.command in ("validate", "replay") and "--real" not in t:
        extra += ["--num-requests", "8", "--max-output-len", "16"]
    return Plan(c.words[1:] + extra, extra, frozenset(needs))
