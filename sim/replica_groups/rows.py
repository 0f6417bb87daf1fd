"""The request rows a group hands back (part.py to merge.py), in few bytes: what the run's
workload already says (each request's arrival, lengths and priority, and under
round-robin its replica) is read back from the workload by request id, text columns
travel as codes into their few values, and integers in the narrowest type that holds
them. unpack() rebuilds the table a single run writes, bit for bit (the same values,
types and column order; tests/test_replica_groups.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.core.workload import Workload

# Columns read back from the workload by request id (request i: the i-th row), and the
# replica, i mod replicas under round-robin.
FROM_WORKLOAD = ("replica", "arrival_s", "prompt_len", "output_len", "priority")
NARROW = (np.int8, np.int16, np.int32)


@dataclass
class PackedRows:
    """A group's request rows by request id, without the FROM_WORKLOAD columns."""
    columns: dict[str, np.ndarray | None]  # every column of the table, in order (None: read back)
    types: dict[str, np.dtype]  # each column's type in the table
    values: dict[str, list]  # a text column's distinct values, which its codes index

    def __len__(self) -> int:
        ids = self.columns["request_id"]
        return 0 if ids is None else len(ids)


def pack(requests: dict[str, np.ndarray]) -> PackedRows:
    """Consumes `requests` (a recorder's request table): each column let go once packed."""
    columns: dict[str, np.ndarray | None] = {}
    types, values = {}, {}
    for c in list(requests):
        col = requests.pop(c)
        types[c] = col.dtype
        if c in FROM_WORKLOAD:
            columns[c] = None
        elif col.dtype == object:
            columns[c], values[c] = _codes(col)
        elif col.dtype.kind == "i":
            columns[c] = _narrow(col)
        else:
            columns[c] = col
    return PackedRows(columns, types, values)


def unpack(parts: list[PackedRows], workload: Workload, replicas: int) -> dict[str, np.ndarray]:
    """The groups' rows as one table by request id; `workload`: the whole run's.
    Consumes the parts' columns. Each part's rows are put (scattered) at their places in
    the table, in its column's type: no concatenated copy, sort or cast of a whole column."""
    places = _places([p.columns["request_id"] for p in parts])
    n = sum(len(p) for p in parts)
    ids = np.empty(n, np.int64)
    for p, at in zip(parts, places):
        ids[at] = p.columns["request_id"]
    first = parts[0]
    out = {}
    for c in list(first.columns):
        if c in FROM_WORKLOAD:
            col = _from_workload(c, ids, workload, replicas).astype(first.types[c], copy=False)
        elif c in first.values:
            col = _decode([p.columns.pop(c) for p in parts], [p.values[c] for p in parts], places, n)
        else:
            col = np.empty(n, first.types[c])
            for p, at in zip(parts, places):
                col[at] = p.columns.pop(c)
        out[c] = col
    return out


def _places(ids: list[np.ndarray]) -> list[np.ndarray]:
    """Each part's rows' places in the table by request id (ids distinct): the id itself
    where the ids are 0..n-1 (every request has its row), else its rank."""
    n = sum(len(i) for i in ids)
    if n and max(int(i.max()) for i in ids if len(i)) == n - 1:
        seen = np.zeros(n, bool)
        for i in ids:
            seen[i] = True
        if seen.all():
            return [i.astype(np.int64) for i in ids]
    every = np.concatenate([i.astype(np.int64) for i in ids])
    rank = np.empty(n, np.int64)
    rank[np.argsort(every, kind="stable")] = np.arange(n)
    return np.split(rank, np.cumsum([len(i) for i in ids])[:-1])


def _from_workload(c: str, ids: np.ndarray, workload: Workload, replicas: int) -> np.ndarray:
    if c == "replica":
        return ids % replicas
    if c == "arrival_s":
        return workload.arrival[ids]
    if c == "prompt_len":
        return workload.prompt_len[ids]
    if c == "output_len":
        return workload.output_len[ids]
    if workload.priority is None:  # a request without one has priority 0
        return np.zeros(len(ids), dtype=np.int64)
    return workload.priority[ids]


def _codes(col: np.ndarray) -> tuple[np.ndarray, list]:
    """A column of few distinct values (status, reject reason): codes into them."""
    values = list(set(col.tolist()))
    codes = np.zeros(len(col), dtype=np.int16 if len(values) > 127 else np.int8)
    for i, v in enumerate(values):
        codes[col == v] = i  # elementwise ==, None included
    return codes, values


def _decode(codes: list[np.ndarray], values: list[list], places: list[np.ndarray], n: int) -> np.ndarray:
    """The groups' coded columns (each part's codes into its own values), each row put at
    its place, as one column of the values' objects."""
    table: dict = {}
    for vs in values:
        for v in vs:
            table.setdefault(v, len(table))
    merged = np.empty(n, np.int64)
    for c, vs, at in zip(codes, values, places):
        merged[at] = np.array([table[v] for v in vs], dtype=np.int64)[c]
    lookup = np.empty(len(table), dtype=object)
    lookup[:] = list(table)
    return lookup[merged]


def _narrow(col: np.ndarray) -> np.ndarray:
    """An integer column in the narrowest type that holds its values."""
    if not len(col):
        return col
    lo, hi = int(col.min()), int(col.max())
    for t in NARROW:
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return col.astype(t)
    return col
