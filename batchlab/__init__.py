"""batchlab: LLM serving simulated (SimPy) and run for real (torch) under one scheduler.

Everything imports under this one name. The subpackages keep the repository's top-level
folders (core/, sim/, backend/, calibration/, experiments/): an install maps them here
(pyproject.toml, package-dir); run from a checkout without installing (PYTHONPATH=.),
they are found beside this folder."""
from __future__ import annotations

import os

__version__ = "0.1.0"

_checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(os.path.dirname(__file__), "core")) and os.path.isfile(
        os.path.join(_checkout, "core", "__init__.py")):
    __path__.append(_checkout)  # a source checkout: batchlab.core is ./core

from batchlab import _compiled  # noqa: E402

if _compiled.pure_requested():  # BATCHLAB_PURE=1: the pure-Python hot path
    _compiled.force_pure()
elif (_stale := _compiled.stale_source(os.path.dirname(os.path.abspath(__file__)))) is not None:
    # Compiled code older than its source would run the old code: run the source, all of it.
    import sys
    print(f"batchlab: {_stale} changed since the hot path was compiled: running it as pure "
          f"Python (pip install -e . compiles it again)", file=sys.stderr)
    _compiled.force_pure()
