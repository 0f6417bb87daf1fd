"""The compiled hot path (setup.py, batchlab/_compiled.py): whether this install runs it
compiled, that BATCHLAB_PURE=1 runs the pure-Python code instead, and that the two write
byte-identical results (compiled, a float-annotated int once came out as 1.0)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from batchlab import _compiled

# Subprocesses start outside the checkout, so that they import the installed package.
ELSEWHERE = tempfile.gettempdir()
CODE = "import json, batchlab._compiled as c; print(json.dumps(c.compiled_modules()))"


def _env(pure: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != _compiled.ENV}
    if pure:
        env[_compiled.ENV] = "1"
    return env


def _compiled_in(pure: bool) -> list[str]:
    out = subprocess.run([sys.executable, "-c", CODE], env=_env(pure), cwd=ELSEWHERE,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def _is_built() -> bool:
    """Whether the build left an extension beside any hot module's source."""
    import importlib.machinery

    import batchlab.core
    # The package's folder, not kv.__file__: a compiled module names a path beside the
    # shared library, which an in-place build does not put in the package.
    return any((Path(folder) / ("kv" + s)).exists() for folder in batchlab.core.__path__
               for s in importlib.machinery.EXTENSION_SUFFIXES)


def test_the_install_runs_the_hot_path_compiled_where_it_was_built():
    """Built (a C compiler was there and mypyc ran): every hot module runs compiled. Not
    built: say why, so that a pure-Python install is visible in the test report."""
    if not _is_built():
        cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
        pytest.skip(f"the hot path was not compiled at install (C compiler: {cc or 'none'}; "
                    f"reinstall to compile, or BATCHLAB_PURE=1 was set at build time)")
    assert _compiled_in(pure=False) == list(_compiled.HOT)


def test_this_process_runs_what_batchlab_pure_asks():
    """CI runs part of the suite with BATCHLAB_PURE=1: then it tests the pure code."""
    if _compiled.pure_requested():
        assert _compiled.compiled_modules() == []
    elif _is_built():
        assert _compiled.compiled_modules() == list(_compiled.HOT)


def test_batchlab_pure_runs_the_python_source():
    assert _compiled_in(pure=True) == []
    code = ("import batchlab._compiled as c, importlib; "
            "print(all(importlib.import_module(m).__file__.endswith('.py') for m in c.HOT))")
    out = subprocess.run([sys.executable, "-c", code], env=_env(True), cwd=ELSEWHERE,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


# What each run exercises: every policy with fast-forward and prefix caching on a multi-turn
# workload over two replicas (the GPU-profile price); the roofline, step by step, reserved KV.
RUNS = {
    "policies": ["--workload", "multiturn", "--num-requests", "150", "--rate", "6",
                 "--policy", "static,continuous,chunked,memory_aware", "--replicas", "2",
                 "--router", "prefix_aware", "--num-kv-blocks", "600"],
    "roofline": ["--workload", "chat", "--num-requests", "200", "--rate", "20", "--cost", "roofline",
                 "--policy", "chunked,continuous", "--step-by-step", "--kv-allocation", "reserved"],
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_compiled_and_pure_write_byte_identical_results(tmp_path, name):
    if not _is_built():
        pytest.skip("the hot path was not compiled at install: nothing to compare")
    outputs = {}
    for pure in (False, True):
        out = tmp_path / ("pure" if pure else "compiled")
        cmd = [sys.executable, "-m", "batchlab", "simulate", *RUNS[name], "--out", str(out)]
        p = subprocess.run(cmd, env=_env(pure), cwd=tmp_path, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr[-2000:]
        files = sorted(f for f in out.rglob("*") if f.is_file())
        outputs[pure] = ({f.relative_to(out): f.read_bytes() for f in files}, p.stdout)
    compiled, pure = outputs[False], outputs[True]
    assert sorted(compiled[0]) == sorted(pure[0]) and len(compiled[0]) >= 4
    for rel, data in compiled[0].items():
        assert data == pure[0][rel], f"{rel} differs between the compiled and the pure build"
    # The printed summary too, less the line that names the output folder.
    def printed(s): return [line for line in s.splitlines() if "written to" not in line]
    assert printed(compiled[1]) == printed(pure[1])


def test_compiled_and_pure_list_the_same_policies(tmp_path):
    """A compiled module keeps no docstring: the listings must not lean on one."""
    if not _is_built():
        pytest.skip("the hot path was not compiled at install: nothing to compare")
    listed = [subprocess.run([sys.executable, "-m", "batchlab", "simulate", "--list-policies"],
                             env=_env(pure), cwd=tmp_path, capture_output=True, text=True, check=True).stdout
              for pure in (False, True)]
    assert listed[0] == listed[1] and "Chunked prefill" in listed[0]


def test_a_source_changed_after_compiling_is_named_so_that_its_code_runs(tmp_path):
    """A checkout built in place: editing a hot module makes its extension stale."""
    (tmp_path / "setup.py").write_text("")
    package, core = tmp_path / "batchlab", tmp_path / "core"
    package.mkdir()
    core.mkdir()
    source = core / "kv.py"
    source.write_text("")
    lib = package / "_hot__mypyc.cpython-311-x86_64-linux-gnu.so"
    lib.write_bytes(b"")
    os.utime(source, (1000, 1000))
    os.utime(lib, (2000, 2000))
    assert _compiled.stale_source(str(package)) is None
    os.utime(source, (3000, 3000))
    assert _compiled.stale_source(str(package)) == os.path.join("core", "kv.py")
    lib.unlink()  # nothing compiled: nothing stale
    assert _compiled.stale_source(str(package)) is None
