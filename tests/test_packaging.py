"""One namespace: pyproject.toml maps the top-level folders into `batchlab` and lists every
subpackage, so a regular install carries all of them and nothing else at the top level."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_subpackage_is_listed_under_batchlab():
    st = _setuptools()
    folders = {"batchlab." + name if name != "batchlab" else name: Path(path)
               for name, path in ((k.removeprefix("batchlab."), v) for k, v in st["package-dir"].items())}
    found = set()
    for name, folder in folders.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]))
    data = set(st["package-data"])  # folders shipped for their files, not their code
    assert found | data == set(st["packages"])
    for name in data:
        rel = name.removeprefix("batchlab.").split(".")
        folder = ROOT / folders["batchlab." + rel[0]] / Path(*rel[1:])
        assert folder.is_dir() and not list(folder.glob("*.py")), name
    assert all(p == "batchlab" or p.startswith("batchlab.") for p in st["packages"])


def test_the_console_script_is_under_batchlab():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"batchlab": "batchlab.experiments.cli:main"}
