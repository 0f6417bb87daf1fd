"""A local pool that forks its workers hands them the objects it holds in their memory
(experiments/forked_pool.py): a split run's tasks name the workload rather than carry it,
and the run is the one process's, bit for bit (tests/test_replica_groups.py)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from batchlab.experiments import executor as ex
from batchlab.experiments.forked_pool import forks


def _from_inherited(key: int) -> tuple[int, float]:
    held = ex.inherited(key)
    return os.getpid(), float(held.sum())


@pytest.mark.skipif(not forks(), reason="workers forked only where fork is the start method")
def test_workers_read_what_the_pool_held_without_pickling_it():
    big, other = np.arange(1000.0), np.ones(3)

    class Refuses(np.ndarray):  # a held object that cannot be sent: only memory can carry it
        def __reduce__(self):
            raise AssertionError("the held object was pickled")

    held = big.view(Refuses)
    with ex.make_executor(2, hold=[held]) as (pool, _):
        key = ex.held(pool, held)
        assert key is not None and ex.held(pool, other) is None
        results = ex.run_all(pool, _from_inherited, [key, key])
    assert {s for _, s in results} == {float(big.sum())}
    assert all(pid != os.getpid() for pid, _ in results)
    assert not ex._HELD  # let go with the pool


def test_other_executors_hold_nothing_and_a_stray_key_is_an_error():
    thing = np.zeros(2)
    with ex.make_executor(1, hold=[thing]) as (serial, _):
        assert ex.held(serial, thing) is None
    with pytest.raises(RuntimeError, match="did not inherit"):
        ex.inherited(id(thing))


@pytest.mark.skipif(not forks(), reason="workers forked only where fork is the start method")
def test_a_split_run_sends_no_share_of_the_workload(capsys, monkeypatch):
    """simulate --workers 2 on a forking pool: its workers take their requests from the
    workload they inherited (a Share pickled would fail here), and print what one process
    prints."""
    from batchlab.sim.replica_groups import Share
    from tests.helpers import run_cli

    base = ["simulate", "--num-requests", "300", "--rate", "30", "--replicas", "4", "--policy", "chunked",
            "--format", "json"]
    code, one, _ = run_cli([*base, "--workers", "1"], capsys)
    assert code == 0

    def refuse(self):
        raise AssertionError("a share of the workload was pickled")
    monkeypatch.setattr(Share, "__reduce__", refuse)
    code, two, _ = run_cli([*base, "--workers", "2"], capsys)
    assert code == 0 and two == one
