"""The example plug-in (docs/examples/batchlab-policy-example) made importable without pip:
its folder on the path, and beside it what `pip install` leaves for importlib.metadata to
find, a dist-info folder with the entry points its pyproject.toml declares. Nothing is
installed into the environment (the `example` fixture in conftest.py sets this up for a
test and restores the registries after it)."""
from __future__ import annotations

import contextlib
import os
import sys
import tomllib
from pathlib import Path

from batchlab.core import orders, schedulers

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs/examples/batchlab-policy-example"
PACKAGE = "batchlab_policy_example"
POLICY_SPEC = f"{PACKAGE}.headroom:KVHeadroomScheduler"
ADMISSION_SPEC = f"{PACKAGE}.orders:shortest_total"
VICTIM_SPEC = f"{PACKAGE}.orders:longest_output"


def write_dist_info(site: Path, name: str, version: str, entry_points: dict[str, dict[str, str]]) -> None:
    """site/NAME-VERSION.dist-info with METADATA and entry_points.txt, as pip writes them."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n"
        for group, eps in entry_points.items()))


def example_site(site: Path) -> str:
    """The example's dist-info under `site`, from its own pyproject.toml; the PYTHONPATH
    (its source folder, then site) that makes it look installed."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    write_dist_info(site, project["name"], project["version"], project["entry-points"])
    return os.pathsep.join([str(EXAMPLE), str(site)])


@contextlib.contextmanager
def registries_restored(modules: tuple[str, ...] = (PACKAGE,)):
    """On leaving: the registries and the plug-in caches as they were on entering, and
    `modules` unloaded (so that a later test resolves its plug-ins anew)."""
    plugins = [schedulers._PLUGINS, *orders._PLUGINS.values()]
    saved = [(t, dict(t)) for p in plugins for t in (p.table, p.by_spec)]
    sets = [(p.loaded, set(p.loaded)) for p in plugins]
    try:
        yield
    finally:
        for table, before in [*saved, *sets]:
            table.clear()
            table.update(before)
        for name in [m for m in sys.modules if m.split(".")[0] in modules]:
            del sys.modules[name]

