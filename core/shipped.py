"""The profiles shipped with the package (calibration/profiles/*.json, and GPU profiles in
calibration/profiles/gpu/), found as package data without importing calibration (which
needs torch), and without importing either profile format (a command that prices a GPU
preset need not load the CPU profile's module, nor the other way round)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

SHIPPED_PACKAGE = "batchlab.calibration"


def shipped_dir(*sub: str) -> Path | None:
    """The folder of the shipped profiles (`sub`: a folder in it, e.g. "gpu")."""
    spec = importlib.util.find_spec(SHIPPED_PACKAGE)  # found, not imported
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)), "profiles", *sub)


def shipped_profiles(*sub: str) -> list[str]:
    """The names of the shipped profiles (in `sub`)."""
    d = shipped_dir(*sub)
    return sorted(p.stem for p in d.glob("*.json")) if d and d.is_dir() else []
