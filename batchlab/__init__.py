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

if os.environ.get("BATCHLAB_PURE", "") not in ("", "0"):  # the pure-Python hot path
    from batchlab._compiled import force_pure
    force_pure()
