"""Scheduler registry. A new policy is one module in this package that decorates its
class with @register; it is imported here automatically, so the simulator, the backend
and the command line all see it with no change elsewhere. A policy from outside the
project is an entry point in the group batchlab.policies, or module:Class given as the
name (core/plugins.py); policy_class resolves either, in whichever process asks."""
from __future__ import annotations

import importlib
import pkgutil

from batchlab.core.config import SchedulerConfig
from batchlab.core.kv import BlockManager
from batchlab.core.plugins import POLICY_GROUP, PluginError, Plugins, kind_of
from batchlab.core.prefix_cache import check_block_size
from batchlab.core.schedulers.base import Scheduler
from batchlab.core.workload.workload import Workload

SCHEDULERS: dict[str, type[Scheduler]] = {}  # built in, and installed plug-ins once loaded


def register(cls: type[Scheduler]) -> type[Scheduler]:
    SCHEDULERS[cls.name] = cls
    return cls


def make_scheduler(config: SchedulerConfig, num_kv_blocks: int) -> Scheduler:
    cls = policy_class(config.policy)
    blocks = config.num_kv_blocks or num_kv_blocks
    return cls(config, BlockManager(blocks, config.block_size))


def policy_class(name: str) -> type[Scheduler]:
    """The class a policy name stands for: built in, an installed entry point of that
    name, or module:Class (PluginError, one line, otherwise)."""
    return _PLUGINS.get(name, "policy")


def all_policies() -> dict[str, type[Scheduler]]:
    """Every registered policy, installed plug-ins included (the listings, the property
    tests): the registry with each entry point of batchlab.policies loaded."""
    return _PLUGINS.everything("policy")


def checked_policy(obj: object, name: str, what: str = "policy") -> type[Scheduler]:
    """obj, if it can run as a policy: a Scheduler subclass with a name and a schedule()."""
    if not (isinstance(obj, type) and issubclass(obj, Scheduler)):
        raise PluginError(what, name, f"{kind_of(obj)} is not a Scheduler subclass; expected "
                                      f"a class derived from batchlab.core.schedulers.base.Scheduler")
    if not isinstance(getattr(obj, "name", None), str):
        raise PluginError(what, name, f"class {obj.__qualname__} sets no name (a class attribute: "
                                      f"the policy's name in messages)")
    if obj.schedule is Scheduler.schedule:
        raise PluginError(what, name, f"class {obj.__qualname__} defines no schedule(now)")
    return obj


_PLUGINS: Plugins[type[Scheduler]] = Plugins(SCHEDULERS, POLICY_GROUP, "module:Class", checked_policy)


def check_prefix_hashes(config: SchedulerConfig, workload: Workload) -> None:
    """Before a run: the workload's prefix hash blocks must map onto the KV blocks
    when the policy caches prefixes (one-line ValueError otherwise)."""
    on = config.prefix_caching
    if on is None:
        on = policy_class(config.policy).prefix_caching_default
    if not on or workload.prefix_hashes is None:
        return
    why = check_block_size(workload.hash_block_size, config.block_size)
    if why:
        first = workload.description[0] if workload.description else "workload"
        row = next(i for i, h in enumerate(workload.prefix_hashes) if h)
        raise ValueError(f"{first}: request {row} (the first with prefix hashes): {why}; "
                         f"expected a --block-size that divides {workload.hash_block_size}, "
                         f"or --no-prefix-caching")


for _mod in pkgutil.iter_modules(__path__):
    if _mod.name not in ("base", "mechanics"):  # the shared classes, not policies
        importlib.import_module(f"{__name__}.{_mod.name}")
