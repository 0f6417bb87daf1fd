"""Bad input never becomes a wrong answer: every case of the corpus in tests/data/bad
(traces of each format, TOML configs, profiles, model directories) and of bad flags for
every command exits with code 2 and one line that names the place (file:line, field or
option), never a traceback, and writes nothing to --out.

Each case runs the CLI in-process. A case is (id, argv, what the message must name);
{bad} is tests/data/bad, {tmp} a fresh folder holding the generated inputs."""
from __future__ import annotations

import pytest

from tests.bad_cases import BAD, CASES, SERVES, generate
from batchlab.experiments.cli import main

OUT_FLAG = {"simulate": "--out", "run": "--out", "validate": "--out", "calibrate": "--out",
            "experiment": "--out", "sweep": "--out", "capacity": "--out", "serve": "--out"}


def _argv(argv: list[str], tmp, out) -> list[str]:
    argv = [a.format(bad=BAD, tmp=tmp) for a in argv]
    if argv[0] in OUT_FLAG and OUT_FLAG[argv[0]] in argv:  # the case is about its --out
        return argv
    if argv[0] in OUT_FLAG:
        return [*argv, OUT_FLAG[argv[0]], str(out / ("p.json" if argv[0] == "calibrate" else "o"))]
    if argv[:2] == ["workload", "convert"]:
        return [*argv, "-o", str(out / "w.csv")]
    if argv[:2] == ["workload", "stats"]:
        return [*argv, "--plot", str(out / "w.png")]
    return argv


def _param(case: tuple[str, list[str], str]):
    """A case of a command that loads the backend first (run, calibrate; validate where it
    serves) needs the backend extra to reach its message."""
    name, argv, names = case
    backend = argv[0] in ("run", "calibrate") or name in SERVES
    return pytest.param(argv, names, id=name, marks=[pytest.mark.backend] if backend else [])


@pytest.mark.parametrize("argv, names", [_param(c) for c in CASES])
def test_bad_input_is_one_line_naming_the_place(argv, names, tmp_path, capsys):
    generate(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    try:
        code = main(_argv(argv, tmp_path, out))
    except SystemExit as e:  # argparse's own errors (a flag that is not a number)
        code = e.code
    _, err = capsys.readouterr()
    errors = [ln for ln in err.splitlines() if ": error:" in ln]
    assert code == 2, err
    assert len(errors) == 1 and "Traceback" not in err, err
    assert names.format(bad=BAD) in errors[0], errors[0]
    assert len(errors[0]) < 600, "an error never echoes a huge field whole"
    assert not any(out.iterdir()), f"wrote to --out: {list(out.iterdir())}"


def test_every_file_of_the_corpus_has_a_case():
    used = {a.split("{bad}/")[1] for c in CASES for a in c[1] if "{bad}/" in a}
    files = {str(p.relative_to(BAD)) for p in BAD.rglob("*") if p.is_file()}
    dirs = {str(p.relative_to(BAD)) for kind in ("models", "runs") for p in (BAD / kind).iterdir()
            if p.is_dir()}
    missing = {f for f in files if f not in used and not any(f.startswith(d + "/") for d in dirs)}
    assert not missing, missing
