"""Scheduler registry. A new policy is one module in this package that decorates its
class with @register; it is imported here automatically, so the simulator, the backend
and the command line all see it with no change elsewhere."""
from __future__ import annotations

import importlib
import pkgutil

from batchlab.core.config import SchedulerConfig
from batchlab.core.kv import BlockManager
from batchlab.core.prefix_cache import check_block_size
from batchlab.core.schedulers.base import Scheduler
from batchlab.core.workload.workload import Workload

SCHEDULERS: dict[str, type[Scheduler]] = {}


def register(cls: type[Scheduler]) -> type[Scheduler]:
    SCHEDULERS[cls.name] = cls
    return cls


def make_scheduler(config: SchedulerConfig, num_kv_blocks: int) -> Scheduler:
    _policy(config)
    blocks = config.num_kv_blocks or num_kv_blocks
    return SCHEDULERS[config.policy](config, BlockManager(blocks, config.block_size))


def check_prefix_hashes(config: SchedulerConfig, workload: Workload) -> None:
    """Before a run: the workload's prefix hash blocks must map onto the KV blocks
    when the policy caches prefixes (one-line ValueError otherwise)."""
    on = config.prefix_caching
    if on is None:
        on = _policy(config).prefix_caching_default
    if not on or workload.prefix_hashes is None:
        return
    why = check_block_size(workload.hash_block_size, config.block_size)
    if why:
        first = workload.description[0] if workload.description else "workload"
        row = next(i for i, h in enumerate(workload.prefix_hashes) if h)
        raise ValueError(f"{first}: request {row} (the first with prefix hashes): {why}; "
                         f"expected a --block-size that divides {workload.hash_block_size}, "
                         f"or --no-prefix-caching")


def _policy(config: SchedulerConfig) -> type[Scheduler]:
    if config.policy not in SCHEDULERS:
        raise ValueError(f"unknown policy {config.policy!r}; expected one of {', '.join(sorted(SCHEDULERS))}")
    return SCHEDULERS[config.policy]


for _mod in pkgutil.iter_modules(__path__):
    if _mod.name != "base":
        importlib.import_module(f"{__name__}.{_mod.name}")
