"""docs/policies.md stays true: its worked example is the shipped file, and its example
orders register and run as written."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.orders import ADMISSION_ORDERS, VICTIM_ORDERS
from batchlab.core.workload import Workload
from batchlab.sim import simulate

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "docs/policies.md").read_text(), re.S)


def test_the_worked_example_is_the_shipped_file_and_short():
    source = (ROOT / "core/schedulers/memory_aware.py").read_text()
    assert len(source.splitlines()) < 100
    example = next(b for b in BLOCKS if "class MemoryAwareScheduler" in b)
    lines = [line for line in example.splitlines() if line.strip()]
    assert all(line in source.splitlines() for line in lines), "docs/policies.md example drifted"


def test_the_example_orders_register_and_run():
    before = set(ADMISSION_ORDERS), set(VICTIM_ORDERS)
    try:
        for block in BLOCKS:
            if "_order(" in block:
                exec(compile(block, "docs/policies.md", "exec"), {})
        admission = (set(ADMISSION_ORDERS) - before[0]).pop()
        victim = (set(VICTIM_ORDERS) - before[1]).pop()
        w = Workload(np.zeros(12), np.full(12, 40), np.arange(1, 13) * 5, priority=np.arange(12) % 3)
        cfg = SchedulerConfig(admission=admission, preemption=victim, block_size=4, max_num_seqs=4)
        res = simulate(w, cfg, LinearCostModel(0.01), 60)
        assert (res.requests["status"] == "finished").all() and res.summary()["preemptions"] > 0
        # The VIP-first order: every priority-0 request is scheduled before any other.
        first = res.requests["first_scheduled_s"]
        vip = res.requests["priority"] == 0
        assert first[vip].max() <= first[~vip].min()
    finally:
        for table, names in ((ADMISSION_ORDERS, before[0]), (VICTIM_ORDERS, before[1])):
            for extra in set(table) - names:
                del table[extra]
