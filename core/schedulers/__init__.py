"""Scheduler registry. A new policy is one module in this package that decorates its
class with @register; it is imported here automatically, so the simulator, the backend
and the command line all see it with no change elsewhere."""
from __future__ import annotations

import importlib
import pkgutil

from core.config import SchedulerConfig
from core.kv import BlockManager
from core.schedulers.base import Scheduler

SCHEDULERS: dict[str, type[Scheduler]] = {}


def register(cls: type[Scheduler]) -> type[Scheduler]:
    SCHEDULERS[cls.name] = cls
    return cls


def make_scheduler(config: SchedulerConfig, num_kv_blocks: int) -> Scheduler:
    if config.policy not in SCHEDULERS:
        raise ValueError(f"unknown policy {config.policy!r}; expected one of {', '.join(sorted(SCHEDULERS))}")
    blocks = config.num_kv_blocks or num_kv_blocks
    return SCHEDULERS[config.policy](config, BlockManager(blocks, config.block_size))


for _mod in pkgutil.iter_modules(__path__):
    if _mod.name != "base":
        importlib.import_module(f"{__name__}.{_mod.name}")
