"""Policies and orders from outside the project: what a name that is not built in may be.

Two ways in, both accepted wherever a built-in name is (--policy, --admission, --preemption,
[scheduler] and [run] in TOML, a sweep's [grid]):
- an installed package's entry point, in the group of its registry (GROUPS); its name is
  the name users give, its value the object, e.g. `kv_headroom = mypkg.policies:KVHeadroom`;
- `module:attribute` given as the name itself, imported from sys.path (PYTHONPATH, the
  working folder): `--policy mypkg.policies:KVHeadroom`.
Either is resolved by name when it is first asked for, in whichever process asks: a
process pool or Dask worker that receives a config resolves the same name again, so
workers need the package (or the folder on PYTHONPATH) that the command had.

The registries themselves (core/schedulers, core/orders) say what a valid object is; this
module imports and reports, each failure one line naming the value (PluginError)."""
from __future__ import annotations

import importlib
import importlib.metadata
import sys
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from typing import Callable, Generic, TypeVar

from batchlab.core.checks import shown

POLICY_GROUP = "batchlab.policies"
ADMISSION_GROUP = "batchlab.admission_orders"
VICTIM_GROUP = "batchlab.victim_orders"
NAME_SHOWN = 120  # characters of a name an error repeats (module:Class names run long)


class PluginError(ValueError):
    """A name that resolves to nothing usable. `problem` is said without the name, so a
    command can lead with the option it came from: `--policy x:Y: no module named 'x'`."""

    def __init__(self, what: str, value: str, problem: str) -> None:
        problem = cut(problem, 400)  # it may quote the value, or a plug-in's message
        super().__init__(f"{what} {shown(value, NAME_SHOWN + 2)}: {problem}")
        self.what, self.value, self.problem = what, value, problem


def cut(text: str, limit: int = NAME_SHOWN) -> str:
    """text, cut to `limit` characters: an error never echoes a huge value whole."""
    return text if len(text) <= limit else f"{text[:limit - 3]}... ({len(text)} characters)"


def is_spec(name: str) -> bool:
    """`module:attribute` rather than a registered name (no registered name has a colon)."""
    return ":" in name


def import_spec(spec: str, what: str) -> object:
    """The object `module:attribute` names (attribute may be dotted: Outer.Inner)."""
    module, _, attr = spec.partition(":")
    parts = attr.split(".")
    if not all(p.isidentifier() for p in module.split(".")) or not all(p.isidentifier() for p in parts):
        raise PluginError(what, spec, "expected module:attribute, e.g. mypkg.policies:MyScheduler")
    return _attribute(_import(module, what, spec), parts, what, spec)


def entry_points(group: str) -> list[EntryPoint]:
    """The group's entry points over every installed distribution, by name. The
    distributions are read once per sys.path (a scan costs milliseconds; the property
    tests ask at every draw)."""
    path = tuple(sys.path)
    if path not in _SCANNED:
        _SCANNED.clear()
        _SCANNED[path] = importlib.metadata.entry_points()
    return sorted(_SCANNED[path].select(group=group), key=lambda ep: (ep.name, ep.value))


_SCANNED: dict[tuple[str, ...], importlib.metadata.EntryPoints] = {}


def entry_point_named(group: str, name: str) -> EntryPoint | None:
    found = [ep for ep in entry_points(group) if ep.name == name]
    return found[0] if found else None


def load_entry_point(ep: EntryPoint, what: str) -> object:
    """The object an entry point names; a failure says which entry point, from where."""
    where = f"entry point {ep.name} = {ep.value} ({ep.group}{_from(ep)})"
    module, _, attr = ep.value.partition(":")
    try:
        return _attribute(_import(module.strip(), what, ep.name), attr.strip().split(".") if attr else [],
                          what, ep.name)
    except PluginError as e:
        raise PluginError(what, ep.name, f"{where}: {e.problem}") from None


T = TypeVar("T")


@dataclass
class Plugins(Generic[T]):
    """A registry's names as users give them: built in (`table`), module:attribute, or an
    entry point of `group`; `check` turns an imported object into the registry's entry
    (or a PluginError), `same` says whether a plug-in's entry is the one already there."""
    table: dict[str, T]
    group: str
    spec_form: str  # what module:attribute names here, for errors: module:Class
    check: Callable[[object, str, str], T]  # (object, name, what) -> entry
    same: Callable[[T, T], bool] = lambda a, b: a is b
    by_spec: dict[str, T] = field(default_factory=dict)  # module:attribute names resolved here
    loaded: set[str] = field(default_factory=set)  # names of `table` that came from entry points

    def get(self, name: str, what: str) -> T:
        found = self.table.get(name) or self.by_spec.get(name)
        if found is not None:
            return found
        if is_spec(name):
            found = self.by_spec[name] = self.check(import_spec(name, what), name, what)
            return found
        ep = entry_point_named(self.group, name)
        if ep is None:
            known = sorted({*self.table, *(e.name for e in entry_points(self.group))})
            raise PluginError(what, name, f"no such {what}; expected one of {', '.join(known)}, "
                                          f"or {self.spec_form}")
        return self._register(ep, what)

    def everything(self, what: str) -> dict[str, T]:
        """The table with every entry point of the group loaded into it."""
        for ep in entry_points(self.group):
            if ep.name not in self.loaded:
                self._register(ep, what)
        return self.table

    def _register(self, ep: EntryPoint, what: str) -> T:
        entry = self.check(load_entry_point(ep, what), ep.name, what)
        # The plug-in's module may have registered it itself; a built-in is never replaced.
        present = self.table.setdefault(ep.name, entry)
        if present is not entry and not self.same(present, entry):
            raise PluginError(what, ep.name, f"entry point {ep.name} = {ep.value} ({ep.group}) takes the "
                                             f"name of a built-in {what}; rename the entry point")
        self.loaded.add(ep.name)
        return present


def kind_of(obj: object) -> str:
    """What an object is, for "... is not a Scheduler subclass (a function)"."""
    if isinstance(obj, type):
        return f"class {obj.__module__}.{obj.__qualname__}"
    return f"{'an' if type(obj).__name__[0] in 'aeiou' else 'a'} {type(obj).__name__}"


def _import(module: str, what: str, value: str):
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and (module == e.name or module.startswith(e.name + ".")):  # not a dependency's
            raise PluginError(what, value, f"no module named {shown(e.name, NAME_SHOWN)} (install its "
                                           f"package, or put its folder on PYTHONPATH)") from None
        raise PluginError(what, value, f"importing {cut(module)} failed: {_one_line(e)}") from None
    except Exception as e:  # noqa: BLE001 - the plug-in's own error, reported in one line
        raise PluginError(what, value, f"importing {cut(module)} failed: {_one_line(e)}") from None


def _attribute(obj: object, parts: list[str], what: str, value: str) -> object:
    path = obj.__name__  # type: ignore[attr-defined]
    for part in parts:
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PluginError(what, value, f"{cut(path)} has no attribute {shown(part, NAME_SHOWN)}") from None
        except Exception as e:  # noqa: BLE001 - a module __getattr__ of the plug-in's own
            raise PluginError(what, value, f"reading {cut(path)}.{cut(part)} failed: {_one_line(e)}") from None
        path = f"{path}.{part}"
    return obj


def _from(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f", from {dist.name} {dist.version}" if dist is not None else ""


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
