"""The profiles shipped with the package (core/cost/profiles/*.json, and GPU profiles in
core/cost/profiles/gpu/), found as package data beside this file, without importing either
profile format (a command that prices a GPU preset need not load the CPU profile's module,
nor the other way round)."""
from __future__ import annotations

from pathlib import Path

SHIPPED = Path(__file__).parent / "profiles"


def shipped_dir(*sub: str) -> Path:
    """The folder of the shipped profiles (`sub`: a folder in it, e.g. "gpu")."""
    return SHIPPED.joinpath(*sub)


def shipped_profiles(*sub: str) -> list[str]:
    """The names of the shipped profiles (in `sub`)."""
    d = shipped_dir(*sub)
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []
