"""The simulator's hot path compiled with mypyc (batchlab/_compiled.py lists it; the few
modules it lists IN_C are built from their .c), wherever mypyc and a C compiler work;
otherwise, or with BATCHLAB_PURE=1, the pure-Python package alone. Everything else about
the distribution is in pyproject.toml."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# Where the repository's folders are in the batchlab namespace (pyproject package-dir).
FOLDERS = {"core": "core", "sim": "sim"}


def hot_modules() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(HOT, IN_C) of batchlab/_compiled.py: the modules compiled, and those of them in C."""
    space: dict = {}
    exec((ROOT / "batchlab" / "_compiled.py").read_text(), space)  # no import: not installed yet
    return space["HOT"], space["IN_C"]


def source_of(module: str, suffix: str) -> str:
    """batchlab.core.kv -> core/kv.py (suffix ".py"), relative to the current folder."""
    return module.split(".", 1)[1].replace(".", "/") + suffix


def staged_sources(stage: Path) -> list[str]:
    """mypy names a module after its path: a tree batchlab/core/... linking the folders, so
    that core/kv.py compiles as batchlab.core.kv. Paths relative to the current folder."""
    pkg = stage / "batchlab"
    if stage.exists():
        shutil.rmtree(stage)
    pkg.mkdir(parents=True)
    shutil.copy(ROOT / "batchlab" / "__init__.py", pkg / "__init__.py")
    for name, folder in FOLDERS.items():
        (pkg / name).symlink_to(ROOT / folder, target_is_directory=True)
    hot, in_c = hot_modules()
    return [os.path.relpath(pkg / source_of(m, ".py")) for m in hot if m not in in_c]


# The commands that build: metadata alone (egg_info, dist_info) needs no compiling.
BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}


def compiled_extensions() -> list:
    if not BUILDS & set(sys.argv[1:]):
        return []
    if os.environ.get("BATCHLAB_PURE", "") not in ("", "0"):
        print("batchlab: BATCHLAB_PURE set: the pure-Python build", file=sys.stderr)
        return []
    try:
        from mypyc.build import mypycify
        os.chdir(ROOT)
        paths = staged_sources(Path("build") / "mypyc-src")
        # Imports outside the hot modules are typed only as far as they need: the same
        # whether or not numpy and simpy are installed where this builds.
        # The modules in C (their .c shipped by MANIFEST.in); one missing runs its .py.
        in_c = [Extension(m, [source_of(m, ".c")]) for m in hot_modules()[1]
                if os.path.isfile(source_of(m, ".c"))]
        return mypycify(["--no-site-packages", "--ignore-missing-imports",
                         "--follow-imports=silent", *paths],
                        opt_level="3", group_name="batchlab._hot", target_dir="build/mypyc") + in_c
    except (Exception, SystemExit) as e:  # noqa: BLE001 - mypyc exits on a type error
        print(f"batchlab: not compiling the hot path ({type(e).__name__}: {e}); pure Python",
              file=sys.stderr)
        return []


class OptionalBuildExt(build_ext):
    """A failed compile (no C compiler, a mypyc error) leaves the pure-Python package:
    every extension is dropped, so that none is half there."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if self.parallel is None:  # one C file per module: compile them side by side
            self.parallel = os.cpu_count() or 1

    def build_extension(self, ext) -> None:
        if ext.name in hot_modules()[1]:
            # The modules in C repeat their .py's float arithmetic to the bit: no a * b + c
            # fused into one rounding (GCC and clang may fuse by default on some targets).
            strict = "/fp:strict" if self.compiler.compiler_type == "msvc" else "-ffp-contract=off"
            ext.extra_compile_args = [*ext.extra_compile_args, strict]
        super().build_extension(ext)

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # noqa: BLE001
            print(f"batchlab: compiling the hot path failed ({type(e).__name__}: {e}); "
                  "pure Python", file=sys.stderr)
            for ext in self.extensions:
                for path in {self.get_ext_fullpath(ext.name)}:
                    if os.path.exists(path):
                        os.remove(path)
            self.extensions = []

    def get_outputs(self) -> list[str]:
        return [p for p in super().get_outputs() if os.path.exists(p)]


setup(ext_modules=compiled_extensions(), cmdclass={"build_ext": OptionalBuildExt})
