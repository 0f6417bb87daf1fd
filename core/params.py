"""Policy parameters: a policy declares a pydantic model (a subclass of PolicyParams) as
its class attribute `Params`; [scheduler.params] in TOML or --policy-param NAME=VALUE
set them, and each policy's scheduler reads its values as `self.params`."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


class PolicyParams(BaseModel):
    """No parameters. A policy's own model adds fields, each with a default, bounds
    (ge/le: the property tests draw values between them) and a description."""
    model_config = ConfigDict(extra="forbid", frozen=True)


def validate_params(policy: str, model: type[PolicyParams], values: dict[str, Any],
                    strict: bool = False) -> PolicyParams:
    """The policy's parameters, or a one-line ValueError naming the parameter."""
    try:
        return model.model_validate(values, strict=strict)
    except ValidationError as e:
        first = e.errors()[0]
        name = ".".join(str(p) for p in first["loc"])
        if first["type"] == "extra_forbidden":
            declared = ", ".join(model.model_fields) or "none"
            raise ValueError(f"scheduler.params.{name}: policy {policy} has no such parameter "
                             f"(its parameters: {declared})") from None
        msg = first["msg"].removeprefix("Value error, ")
        raise ValueError(f"scheduler.params.{name}: {msg} for policy {policy} "
                         f"(got {first.get('input')!r})") from None


def describe(model: type[PolicyParams]) -> list[dict[str, Any]]:
    """Each parameter: name, type, default, bounds and description (for the listings)."""
    out = []
    for name, f in model.model_fields.items():
        bounds = {type(m).__name__.lower(): getattr(m, type(m).__name__.lower())
                  for m in f.metadata if type(m).__name__ in ("Ge", "Gt", "Le", "Lt")}
        out.append({"name": name, "type": getattr(f.annotation, "__name__", str(f.annotation)),
                    "default": f.default, "bounds": bounds, "description": f.description or ""})
    return out
