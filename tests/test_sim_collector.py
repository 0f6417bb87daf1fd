"""The collector over a simulation (sim/collector.py): the run's set-up is frozen out of
collections while it runs, and the collector is as the caller left it afterwards."""
from __future__ import annotations

import gc

import numpy as np

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.workload import Workload
from batchlab.sim import simulate
from batchlab.sim.collector import FULL_EVERY, YOUNG, YOUNG_A_REPLICA, long_lived

COST = LinearCostModel(0.004, {"prefill_tokens": 2e-5, "num_seqs": 1e-4})
WORK = Workload(np.linspace(0, 1, 30), np.full(30, 40), np.full(30, 8))


def run() -> dict:
    return simulate(WORK, SchedulerConfig(policy="continuous"), COST, 1000, replicas=3).summary()


def test_set_up_is_frozen_during_the_run_and_given_back_after():
    seen = []
    before = gc.get_threshold()
    with long_lived() as settled:
        seen.append((gc.isenabled(), gc.get_freeze_count()))
        kept = [[i] for i in range(1000)]  # the set-up's objects
        settled()
        seen.append((gc.isenabled(), gc.get_freeze_count()))
        during = gc.get_threshold()
    assert seen[0] == (False, 0)  # paused while they are built
    assert seen[1][0] and seen[1][1] >= len(kept)  # then frozen, collector back on
    assert during[0] == max(before[0], YOUNG) > 700  # young ones rarer
    assert during[1] == before[1] and during[2] == max(before[2], FULL_EVERY)  # full ones rarer
    assert gc.isenabled() and gc.get_freeze_count() == 0 and gc.get_threshold() == before


def test_young_collections_rarer_still_with_many_replicas():
    before = gc.get_threshold()
    for replicas, young in ((1, max(before[0], YOUNG)), (10**6, YOUNG_A_REPLICA * 10**6)):
        with long_lived(replicas) as settled:
            settled()
            assert gc.get_threshold()[0] == young
    assert YOUNG_A_REPLICA * 10**6 > YOUNG and gc.get_threshold() == before


def test_a_run_leaves_the_collector_as_the_caller_set_it():
    gc.freeze()  # the caller's own frozen objects stay frozen
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        a = run()
        # Still frozen (some may have been freed since): the run did not unfreeze them.
        assert gc.isenabled() and 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
    gc.disable()  # and a collector turned off stays off
    try:
        assert run() == a
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.enable()
    assert run() == a and gc.isenabled() and gc.get_freeze_count() == 0


def test_an_error_in_the_run_gives_the_collector_back():
    try:
        with long_lived() as settled:
            settled()
            raise KeyError("stop")
    except KeyError:
        pass
    assert gc.isenabled() and gc.get_freeze_count() == 0
