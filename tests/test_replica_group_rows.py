"""Groups' request rows packed and unpacked (sim/replica_groups/rows.py): the table by
request id, every column's values and type, whether or not every request has its row
(an interrupted run's groups leave some out)."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from batchlab.core.workload import Workload
from batchlab.sim.replica_groups.rows import pack, unpack

STATUS = np.array(["finished", "rejected", "running", None], dtype=object)


def table(ids: np.ndarray, n: int, replicas: int) -> dict[str, np.ndarray]:
    """A request table's columns for request ids `ids`, as a group hands them over."""
    return {"request_id": ids.astype(np.int64), "replica": ids % replicas,
            "arrival_s": ids * 0.5, "prompt_len": ids + 1, "output_len": ids % 7 + 1,
            "priority": ids % 3, "finish_s": np.where(ids % 4 == 0, np.nan, ids * 0.25),
            "preemptions": ids * 1000 - 5, "status": STATUS[ids % 4], "done": ids % 2 == 0}


@given(st.integers(1, 80), st.integers(1, 5), st.data())
def test_unpacked_rows_are_the_table_by_request_id(n, replicas, data):
    groups = data.draw(st.integers(1, 4))
    kept = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    which = data.draw(st.lists(st.integers(0, groups - 1), min_size=n, max_size=n))
    ids = np.arange(n)[np.array(kept, bool)]
    if not len(ids):
        return
    owner = np.array(which)[ids]
    parts = [pack(table(ids[owner == g], n, replicas)) for g in range(groups) if (owner == g).any()]
    work = Workload(np.arange(n) * 0.5, np.arange(n) + 1, np.arange(n) % 7 + 1, priority=np.arange(n) % 3)
    assert_same_table(unpack(parts, work, replicas), table(ids, n, replicas))


def assert_same_table(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    """The same columns, in order, each of the same dtype and values (NaN equal to NaN)."""
    assert list(got) == list(want)
    for c in want:
        assert got[c].dtype == want[c].dtype, c
        if want[c].dtype == object:
            assert got[c].tolist() == want[c].tolist(), c
        else:
            assert np.array_equal(got[c], want[c], equal_nan=want[c].dtype.kind == "f"), c


@given(st.integers(1, 300), st.integers(1, 12), st.data())
def test_a_groups_rows_dealt_round_robin_are_copied_in_as_scattered(n, replicas, data):
    """unpack() told the parts' groups (merge.py): where each part holds every request its
    group is dealt (all rows there), its rows go in by stride; the same table as by id.
    A part short of one of its rows (an interrupted run) is scattered by id."""
    from batchlab.sim.replica_groups.split import dealt, replica_groups
    groups = replica_groups(replicas, data.draw(st.integers(1, 4)))
    work = Workload(np.arange(n) * 0.5, np.arange(n) + 1, np.arange(n) % 7 + 1,
                    priority=None if data.draw(st.booleans()) else np.arange(n) % 3)
    statuses = data.draw(st.sampled_from([STATUS, np.array(["finished"], dtype=object)]))
    drop = data.draw(st.booleans()) and n > 1  # one row missing: not every request has its row

    def rows(ids: np.ndarray) -> dict[str, np.ndarray]:
        t = table(ids, n, replicas)
        t["priority"] = ids % 3 if work.priority is not None else np.zeros(len(ids), np.int64)
        t["status"] = statuses[ids % len(statuses)]
        return t
    parts_ids = [dealt(n, replicas, g) for g in groups]
    if drop:
        j = next(k for k, i in enumerate(parts_ids) if len(i))
        parts_ids[j] = parts_ids[j][1:]
    ids = np.sort(np.concatenate(parts_ids))
    if not len(ids):
        return
    want = rows(ids)
    for told in ([g for g in groups], None):
        assert_same_table(unpack([pack(rows(i)) for i in parts_ids], work, replicas, told), want)


@given(st.integers(2, 60), st.integers(1, 5), st.booleans())
def test_the_workloads_columns_are_read_not_copied(n, replicas, every):
    """Where every request has its row, arrival and lengths are the workload's own columns
    read through views that cannot write them; otherwise the table's own gathers."""
    ids = np.arange(n if every else n - 1)  # the last request without its row: an interrupted run
    work = Workload(np.arange(n) * 0.5, np.arange(n) + 1, np.arange(n) % 7 + 1, priority=np.arange(n) % 3)
    got = unpack([pack(table(ids, n, replicas))], work, replicas, [range(replicas)])
    for c, w in (("arrival_s", work.arrival), ("prompt_len", work.prompt_len), ("output_len", work.output_len),
                 ("priority", work.priority)):
        assert np.shares_memory(got[c], w) == every
        assert got[c].flags.writeable != every
    assert got["replica"].flags.writeable and not np.shares_memory(got["replica"], work.arrival)


@given(st.integers(2, 200), st.integers(1, 8), st.integers(1, 3), st.booleans())
def test_columns_made_ahead_are_filled_as_fresh_ones(n, replicas, groups, every):
    """spare_columns() of the first part back: unpack() fills them (where they fit: every
    request has its row) and the table is the one made without them."""
    from batchlab.sim.replica_groups.rows import spare_columns
    from batchlab.sim.replica_groups.split import dealt, replica_groups
    gs = replica_groups(replicas, groups)
    work = Workload(np.arange(n) * 0.5, np.arange(n) + 1, np.arange(n) % 7 + 1)
    ids = [dealt(n, replicas, g) for g in gs]
    if not every:
        ids[-1] = ids[-1][:-1]
    if not all(len(i) for i in ids):
        return

    def parts():
        return [pack(table(i, n, replicas)) for i in ids]
    spare = spare_columns(parts()[0], n)
    made = dict(spare)
    got = unpack(parts(), work, replicas, gs, spare)
    assert_same_table(got, unpack(parts(), work, replicas, gs))
    assert made and all(np.shares_memory(got[c], a) == (len(got[c]) == n) for c, a in made.items())
