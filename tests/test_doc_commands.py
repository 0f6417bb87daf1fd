"""Every `batchlab ...` command printed in README.md and docs/*.md runs as printed and
prints what the text says. Each is parsed by the real command line; the simulation
world's run in document order (shortened by options appended after the printed words:
tests/doc_commands.py); those on the torch backend or against a server (slow) are run where
torch is installed; a synopsis names only options its command has."""
from __future__ import annotations

import argparse
import contextlib
import io
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from batchlab.core.workload import traces_dir
from batchlab.experiments.cli import build_parser, main
from tests.doc_commands import ROOT, DocCommand, documented_commands, plan
from tests.serve_helpers import ServeProcess, free_port

COMMANDS = documented_commands()
FILES = list(dict.fromkeys(c.where.split(":")[0] for c in COMMANDS))


def test_the_docs_print_commands_to_check():
    assert len(COMMANDS) >= 60 and {"README.md", "docs/capacity.md", "docs/calibration.md"} <= set(FILES)


@pytest.mark.parametrize("c", [c for c in COMMANDS if not c.synopsis], ids=str)
def test_every_documented_command_parses(c: DocCommand):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            build_parser((c.command,)).parse_args(c.words[1:])
        except SystemExit:
            pytest.fail(f"{c}: {err.getvalue().strip()}")


@pytest.mark.parametrize("c", [c for c in COMMANDS if c.synopsis], ids=str)
def test_a_synopsis_names_only_options_its_command_has(c: DocCommand):
    words = c.text.split()
    sub = build_parser((c.command,))._subparsers._group_actions[0].choices[c.command]
    known = set(sub._option_string_actions)
    for action in sub._actions:  # capacity max-rate|replicas|deploy: the subcommands' options
        if isinstance(action, argparse._SubParsersAction):
            for p in action.choices.values():
                known |= set(p._option_string_actions)
    for w in words:
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9*-]*", w):
            pattern = re.compile(re.escape(flag).replace(r"\*", "[a-z]+") + "$")
            assert any(pattern.match(k) for k in known), f"{c}: {flag} is not an option of {c.command}"


# -- what the text says each prints ------------------------------------------------------------

def _answers(out: str, first: str) -> list[list[str]]:
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.lstrip().startswith(first))
    rows = []
    for line in lines[head + 2:]:
        if not line.strip() or ":" in line:
            break
        rows.append(line.split())
    return rows


def _max_rate(out: str, cwd: Path) -> None:  # the highest rate each policy sustains
    rows = _answers(out, "policy")
    assert [r[0] for r in rows] == ["continuous", "chunked"] and all(float(r[1]) > 0 for r in rows)


def _replicas(out: str, cwd: Path) -> None:  # the fewest replicas of each candidate, GPUs and $/hour
    rows = _answers(out, "candidate")
    assert len(rows) == 4
    for r in rows:  # label (3 words), replicas, GPUs, $/hour, ...
        assert int(r[3]) >= 1 and int(r[4]) == int(r[3]) * int(r[1].removeprefix("TP"))
        assert float(r[5]) == pytest.approx(int(r[4]) * 2.5)
    with_long = "the model's context" in out  # the window holds one conversation over 8,192 tokens
    assert with_long and "too long" in out


def _deploy(out: str, cwd: Path) -> None:  # winner and runner-up, launch lines, what binds, the range
    win = out.split("winner: ")[1]
    assert win.split("\n")[1].strip().startswith("vllm serve meta-llama/Meta-Llama-3-70B-Instruct ")
    assert "tightest at the answer: " in win and "reproduce: batchlab simulate " in win
    assert "sized for: the busiest 120 s of azure_conv" in out and "sensitivity of " in out


def _files(*names: str) -> Callable[[str, Path], None]:
    def check(out: str, cwd: Path) -> None:
        for n in names:
            assert list(cwd.glob(n)), f"{n} not written"
    return check


def _lists(*names: str) -> Callable[[str, Path], None]:
    def check(out: str, cwd: Path) -> None:
        for n in names:
            assert n in out
    return check


SAYS: dict[str, Callable[[str, Path], None]] = {
    "batchlab capacity max-rate --workload chat --policy continuous,chunked --slo-ttft-ms 2000 --slo-tpot-ms 100":
        _max_rate,
    "batchlab capacity replicas --workload azure_conv --rate-scale 3 --policy chunked --router least_loaded "
    "--slo-ttft-ms 1000 --slo-tpot-ms 60 --gpu-hour-price 2.5 --candidate llama-3-70b:4:h100-sxm,"
    "llama-3-70b:4:h200,llama-3-8b:1:h100-sxm,llama-3-8b:1:h200": _replicas,
    "batchlab simulate --list-policies": _lists("memory_aware", "continuous", "chunked", "static"),
    "batchlab experiment static-vs-continuous --small --out out/svc": _files("out/svc/*"),
    "batchlab experiment --list": _lists("static-vs-continuous", "tradeoff", "latency-vs-load", "fidelity"),
    "batchlab workload stats azure_code --plot code.png": _files("code.png"),
}


def _says(c: DocCommand) -> Callable[[str, Path], None] | None:
    if c.text.startswith("batchlab capacity deploy "):
        return _deploy
    if c.text.startswith("batchlab capacity max-rate ") and "--out cap/" in c.text:
        return _files("cap/answers.csv", "cap/points.csv")
    if "--plot plots/" in c.text:
        return _files("plots/*.png")
    return SAYS.get(c.text)


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """A folder to run documented commands in, as from the repository root: ../shared is
    the shared data beside the repository, ./Qwen3-30B-A3B a folder holding a config.json."""
    work = tmp_path / "repo"
    work.mkdir()
    shared = ROOT.parent / "shared"
    if shared.exists():
        (tmp_path / "shared").symlink_to(shared)
    (work / "Qwen3-30B-A3B").mkdir()
    shutil.copy(ROOT / "core/model/presets/models/qwen3-30b-a3b.json", work / "Qwen3-30B-A3B/config.json")
    monkeypatch.chdir(work)
    monkeypatch.setenv("BATCHLAB_TRACES", str(traces_dir()))
    return work


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def _traces_present() -> bool:
    return (traces_dir() / "azure2023_conv.csv").exists()


def _run_in_order(commands: list[DocCommand], workdir: Path) -> list[str]:
    """Each command run (in document order, in one folder: later ones read what earlier
    ones wrote), checked against what its text says; the failures, in words."""
    failed = []
    for c in commands:
        p = plan(c)
        code, out, err = _run(p.argv)
        if code != 0:
            failed.append(f"{c} (shortened by {' '.join(p.shortened) or 'nothing'}) exit {code}: "
                          f"{err.strip()[-400:]}")
            continue
        check = _says(c)
        if check is not None:
            try:
                check(out, workdir)
            except (AssertionError, StopIteration, IndexError, ValueError) as e:
                failed.append(f"{c}: does not print what its text says: {e}")
    return failed


def _simulation_world(file: str) -> list[DocCommand]:
    return [c for c in COMMANDS if c.where.startswith(f"{file}:") and not c.synopsis
            and not plan(c).needs & {"torch", "server", "elsewhere"}]


def _heavy_but_readme(files: list[str]) -> list:
    """The README's page runs with the suite (its commands are the ones users run first);
    the other pages' runs are `heavy` (pytest -m heavy), to keep the suite's time."""
    return [f if f == "README.md" else pytest.param(f, marks=pytest.mark.heavy) for f in files]


@pytest.mark.slow
@pytest.mark.parametrize("file", _heavy_but_readme([f for f in FILES if _simulation_world(f)]))
def test_the_simulation_commands_of_a_page_run_as_printed(file, workdir):
    commands = [c for c in _simulation_world(file) if "--sensitivity" not in c.text]
    if any("traces" in plan(c).needs for c in commands) and not _traces_present():
        pytest.skip(f"the shared traces are not in {traces_dir()} (set BATCHLAB_TRACES)")
    if any("shared" in plan(c).needs for c in commands) and not (ROOT.parent / "shared").exists():
        pytest.skip(f"the shared data is not in {ROOT.parent / 'shared'}")
    assert not _run_in_order(commands, workdir)


@pytest.mark.slow
@pytest.mark.heavy
def test_the_capacity_pages_deploy_with_its_sensitivity_runs_as_printed(workdir):
    commands = [c for c in COMMANDS if "--sensitivity" in c.text and not c.synopsis]
    assert commands
    if not _traces_present():
        pytest.skip(f"the shared traces are not in {traces_dir()} (set BATCHLAB_TRACES)")
    assert not _run_in_order(commands, workdir)


def test_the_readmes_table_is_what_batchlab_simulate_prints(workdir):
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## What `batchlab simulate` shows")[1].split("```")[1].strip("\n").splitlines()
    code, out, _ = _run(["simulate"])
    assert code == 0
    printed = [line.rstrip() for line in out.splitlines()]
    for line in table:  # abridged: each row it shows, as printed
        assert line.rstrip() in printed, line


# -- the torch backend and a server: slow, where torch is installed -----------------------------

def _torch_world(file: str) -> list[DocCommand]:
    return [c for c in COMMANDS if c.where.startswith(f"{file}:") and not c.synopsis
            and "elsewhere" not in plan(c).needs and plan(c).needs & {"torch", "server"}]


@pytest.mark.slow
@pytest.mark.backend
@pytest.mark.parametrize("file", _heavy_but_readme([f for f in FILES if _torch_world(f)]))
def test_the_backend_commands_of_a_page_run_as_printed(file, workdir):
    """In document order, with the page's simulation commands (which may read what the
    backend wrote); `batchlab serve ... &` started on a free port (the later commands'
    --endpoint pointed at it), stopped with Ctrl-C as the page does."""
    commands = [c for c in COMMANDS if c.where.startswith(f"{file}:") and not c.synopsis
                and "elsewhere" not in plan(c).needs and "--sensitivity" not in c.text
                and ("traces" not in plan(c).needs or _traces_present())]
    server, failed = None, []
    try:
        for c in commands:
            if c.command == "serve":
                assert c.background, f"{c}: a server the page does not start in the background"
                words, args, out_dir = c.words[2:], [], workdir / "served"
                while words:  # its port and --out are ServeProcess's (a free port, the folder here)
                    w = words.pop(0)
                    if w == "--out":
                        out_dir = workdir / words.pop(0)
                    elif w == "--port":
                        words.pop(0)
                    else:
                        args.append(w)
                server = ServeProcess(*args, out=out_dir, port=free_port())
                server.wait_ready()
                continue
            if "http://127.0.0.1:8000" in c.text:
                assert server is not None, f"{c}: no server started before it"
                c = DocCommand(c.where, c.text.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}"),
                               c.background)
            failed += _run_in_order([c], workdir)
    finally:
        if server is not None:
            server.stop()
    assert not failed
