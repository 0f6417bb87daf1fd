"""Shared test set-up.

- `pytest --policy NAME`: focus the property tests on one policy, registered, installed
  (an entry point) or module:Class (the same as BATCHLAB_TEST_POLICY=NAME; see tests/draws.py).
- The `backend` marker: a test that serves on the torch backend (torch, transformers, the
  HTTP stack: the `backend` extra) is skipped where that extra is not installed, so that
  `pip install -e ".[test]"` runs the simulation half green. A test using one of the
  torch fixtures below (BACKEND_FIXTURES) is skipped the same way, marked or not. Modules
  that import torch at their top skip themselves with pytest.importorskip("torch").
- Calibrations keep a serving phase contended twice, warning (BATCHLAB_ON_CONTENTION=keep,
  inherited by the commands the tests start): on a busy machine the suite passes, only
  slower. The tests of refusing set their mode themselves."""
from __future__ import annotations

import importlib.util
import os

import pytest

os.environ.setdefault("BATCHLAB_ON_CONTENTION", "keep")  # calibration/sweep/on_contention.py
BACKEND_MODULES = ("torch", "transformers", "fastapi", "uvicorn")
HAVE_BACKEND = all(importlib.util.find_spec(m) is not None for m in BACKEND_MODULES)


def pytest_addoption(parser) -> None:
    parser.addoption("--policy", metavar="NAME",
                     help="property tests: draw only this policy (a registered or installed "
                          "name, or module:Class)")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "backend: needs the backend extra (torch, transformers, "
                                       "fastapi, uvicorn); skipped without it")
    if config.getoption("--policy"):
        os.environ["BATCHLAB_TEST_POLICY"] = config.getoption("--policy")


# Fixtures that load a model on torch: a test using one needs the backend, marked or not.
BACKEND_FIXTURES = {"runtime", "tiny", "hf_runtime", "profile_file", "validated"}


def pytest_collection_modifyitems(config, items) -> None:
    if HAVE_BACKEND:
        return
    skip = pytest.mark.skip(reason="needs the backend extra: pip install -e '.[backend]'")
    for item in items:
        uses_torch = BACKEND_FIXTURES & set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("backend") or uses_torch:
            item.add_marker(skip)


# -- the torch backend, shared by the modules that serve on it (each module gets its own) --

@pytest.fixture(scope="module")
def runtime():
    """batchlab-tiny on one thread with a 32 MiB KV pool."""
    from batchlab.backend.runtime import Runtime
    return Runtime("batchlab-tiny", kv_memory="32MiB", threads=1)


@pytest.fixture(scope="module")
def tiny():
    """batchlab-tiny's seeded weights, with its Hugging Face model kept (for generate())."""
    import torch
    from batchlab.backend.models import build_preset
    torch.set_num_threads(1)
    return build_preset("batchlab-tiny", seed=0)


@pytest.fixture(scope="module")
def hf_runtime(tiny):
    """A runtime serving `tiny` itself, so its outputs can be checked against generate()."""
    from batchlab.backend.runtime import Runtime
    return Runtime(loaded=tiny, keep_hf=True, kv_memory="64MiB", threads=1)


# -- a calibrated profile and a stored validation, made once (read only: copy to change) --

@pytest.fixture(scope="session")
def profile_file(tmp_path_factory):
    """A real calibration of the tiny model on the tests' tiny grid (seconds)."""
    from batchlab.calibration import calibrate
    from batchlab.calibration.sweep.grid import tiny_grid

    path = tmp_path_factory.mktemp("profile") / "tiny.json"
    calibrate("batchlab-tiny", "cpu", threads=1, out=path, grid=tiny_grid(), progress=False,
              log=lambda _m: None)
    return path


@pytest.fixture(scope="session")
def validated(tmp_path_factory, profile_file):
    """`batchlab validate --out` of both policies with that profile: (the folder, the report)."""
    from tests.helpers import SMALL_VALIDATE, cli

    out = tmp_path_factory.mktemp("validate")
    code, text, err = cli(["validate", *SMALL_VALIDATE, "--policy", "continuous,chunked",
                           "--profile", str(profile_file), "--out", str(out)])
    assert code == 0, err
    return out, text


# -- the example plug-in of docs/examples, importable and discoverable as if installed --

@pytest.fixture
def example(tmp_path, monkeypatch):
    """docs/examples/batchlab-policy-example on sys.path and PYTHONPATH (for subprocesses),
    its entry points discoverable (tests/plugin_site.py); the registries restored after."""
    from tests.plugin_site import example_site, registries_restored  # lazy: only these tests
    path = example_site(tmp_path / "site")
    for folder in reversed(path.split(os.pathsep)):
        monkeypatch.syspath_prepend(folder)  # invalidates the import and metadata caches
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH")) if p))
    with registries_restored():
        yield path
