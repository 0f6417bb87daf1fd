"""The simulator's hot path, compiled: which modules the normal install builds with mypyc
(setup.py reads HOT from this file), whether this process runs them compiled, and the
switch back to the pure-Python code.

BATCHLAB_PURE=1 at build time skips compiling (setup.py); at run time it makes every
module of HOT import from its .py, beside the extension, so one install runs either way.
The pure code is the reference: both builds write byte-identical results
(tests/test_compiled.py)."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

# From a profile of the simulator (benchmarks/bench_sim.py --profile): the engine loop,
# the scheduler and the decode group, KV blocks, metrics recording, requests and batches,
# step features and the roofline (docs/results/2026-12-02-compiled.md); the default price
# (the served GPU form: docs/results/2026-12-06-default-price-compiled.md).
HOT = (
    "batchlab.core.request",
    "batchlab.core.emission",
    "batchlab.core.kv_home",
    "batchlab.core.batch",
    "batchlab.core.features",
    "batchlab.core.kv",
    "batchlab.core.prefix_cache",
    "batchlab.core.kv_reservation",
    "batchlab.core.decode_window",
    "batchlab.core.decode_group",
    "batchlab.core.fast_forward",
    "batchlab.core.step_runs",
    "batchlab.core.gap_fold",
    "batchlab.core.metrics",
    "batchlab.core.cost.form",
    "batchlab.core.cost.roofline",
    "batchlab.core.cost.linear",
    "batchlab.core.cost.gpu_step",
    "batchlab.core.cost.deployed_step",
    "batchlab.core.cost.served.model",
    "batchlab.core.orders.admission",
    "batchlab.core.orders.victims",
    "batchlab.core.schedulers.mechanics",
    "batchlab.core.schedulers.base",
    "batchlab.core.schedulers.continuous",
    "batchlab.core.schedulers.chunked",
    "batchlab.sim.resumption",
    "batchlab.sim.pending_run",
    "batchlab.sim.replica_loads",
    "batchlab.sim.router",
    "batchlab.sim.run_plan",
    "batchlab.sim.engine",
    "batchlab.sim.dealt",
    "batchlab.sim.arrivals",
    "batchlab.core.run_clock",
)
# Hot modules written in C as well (setup.py builds each from the .c beside its .py, with
# no fused multiply-adds): the .py is the reference, and what runs where they are not
# built or under BATCHLAB_PURE=1. A fast-forward run's clock: its times a C double each,
# no Python float a step (docs/results/2026-12-07-day-of-traffic.md).
IN_C = ("batchlab.core.run_clock",)

ENV = "BATCHLAB_PURE"


def pure_requested() -> bool:
    """BATCHLAB_PURE set to anything but "" or "0"."""
    return os.environ.get(ENV, "") not in ("", "0")


class PureFinder:
    """A meta-path finder ahead of the others: a module of HOT is found as the rest find
    it, then loaded from its .py instead of the compiled extension."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in HOT:
            return None
        for finder in sys.meta_path:
            if finder is cls or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is None:
                continue
            origin = spec.origin or ""
            if origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
                source = os.path.join(os.path.dirname(origin), name.rpartition(".")[2] + ".py")
                if os.path.isfile(source):
                    return importlib.util.spec_from_file_location(name, source)
            return spec
        return None


def stale_source(package: str) -> str | None:
    """In a checkout built in place (pip install -e), the first hot module whose .py changed
    after the hot path was compiled (its extension would run the old code), else None; a
    module IN_C: its .py or .c, after its own extension. package: the folder of
    batchlab/__init__.py."""
    libs = [f for f in os.listdir(package) if f.startswith("_hot__mypyc.")]
    checkout = os.path.dirname(package)
    if not libs or not os.path.isfile(os.path.join(checkout, "setup.py")):
        return None
    built = min(os.stat(os.path.join(package, f)).st_mtime for f in libs)
    for name in HOT:
        stem = os.path.join(checkout, *name.split(".")[1:])
        sources, when = [stem + ".py"], built
        if name in IN_C:
            ext = [stem + s for s in importlib.machinery.EXTENSION_SUFFIXES if os.path.isfile(stem + s)]
            if not ext:
                continue  # not built: its .py runs
            sources, when = [stem + ".py", stem + ".c"], os.stat(ext[0]).st_mtime
        for source in sources:
            if os.path.isfile(source) and os.stat(source).st_mtime > when:
                return os.path.relpath(source, checkout)
    return None


def force_pure() -> None:
    if PureFinder not in sys.meta_path:
        sys.meta_path.insert(0, PureFinder)


def compiled_modules() -> list[str]:
    """The modules of HOT that this process runs compiled (imports them all)."""
    out = []
    for name in HOT:
        module = importlib.import_module(name)
        if not (module.__file__ or "").endswith(".py"):
            out.append(name)
    return out
